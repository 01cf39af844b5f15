#!/usr/bin/env bash
# Builds and installs neurenix IPU (Rust + C++ + Python) into the current
# Python environment. With --test, also installs what the test suite needs
# (CMake and GoogleTest from Debian, pytest/hypothesis/onnxruntime from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if [[ "${1:-}" == "--test" ]]; then
  if ! command -v cmake >/dev/null || [[ ! -e /usr/include/gtest/gtest.h ]]; then
    SUDO=""
    if [[ "$(id -u)" -ne 0 ]] && command -v sudo >/dev/null; then SUDO=sudo; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq cmake libgtest-dev >/dev/null
  fi
  "$PYTHON" -m pip install -q --disable-pip-version-check ".[test]"
else
  "$PYTHON" -m pip install -q --disable-pip-version-check .
fi
