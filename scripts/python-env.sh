# Sourced by the other scripts: picks the Python environment to install into.
#
# - $PYTHON, if set, is used as given.
# - An active virtual environment ($VIRTUAL_ENV) or conda environment is used.
# - Otherwise the scripts use (and if needed create) the virtual environment
#   .venv/ at the top of the repository, so that a system Python that refuses
#   `pip install` (PEP 668, "externally-managed-environment", as on Debian 12)
#   works too. Debian's python3-venv is installed when venv cannot be created.
#
# Sets PYTHON to the interpreter to use.

_nx_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

_nx_apt_install() {
  local sudo=""
  if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null; then sudo=sudo; else
      echo "error: need root (or sudo) to install Debian packages: $*" >&2
      return 1
    fi
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

if [[ -n "${PYTHON:-}" ]]; then
  :
elif [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
  PYTHON="$VIRTUAL_ENV/bin/python"
elif [[ -n "${CONDA_PREFIX:-}" && -x "$CONDA_PREFIX/bin/python" ]]; then
  PYTHON="$CONDA_PREFIX/bin/python"
else
  _nx_venv="$_nx_root/.venv"
  if [[ ! -x "$_nx_venv/bin/python" ]] || ! "$_nx_venv/bin/python" -m pip --version >/dev/null 2>&1; then
    _nx_base=$(command -v python3 || true)
    if [[ -z "$_nx_base" ]]; then
      echo "error: no python3 on PATH; install Python 3.9 or newer" >&2
      exit 1
    fi
    echo "== No virtual environment is active: creating one in .venv/ (with $_nx_base)"
    rm -rf "$_nx_venv"
    if ! "$_nx_base" -m venv "$_nx_venv" >/dev/null 2>&1; then
      # Debian ships venv's pip bootstrap separately.
      _nx_ver=$("$_nx_base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
      echo "== Installing Debian's python3-venv so that a virtual environment can be created"
      _nx_apt_install python3-venv "python${_nx_ver}-venv" || _nx_apt_install python3-venv
      rm -rf "$_nx_venv"
      "$_nx_base" -m venv "$_nx_venv"
    fi
  fi
  PYTHON="$_nx_venv/bin/python"
  NEURENIX_CREATED_VENV=1
fi
export PYTHON

# Tells the user how to use the environment the scripts installed into.
nx_venv_hint() {
  if [[ -n "${NEURENIX_CREATED_VENV:-}" ]]; then
    echo "== neurenix IPU is installed in the virtual environment .venv/; to use it in your shell:"
    echo "     source .venv/bin/activate"
  fi
}
