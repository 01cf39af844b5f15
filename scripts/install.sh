#!/usr/bin/env bash
# Builds and installs neurenix IPU (Rust + C++ + Python) into the active
# Python environment, or into .venv/ when none is active (see python-env.sh).
# With --test, also installs what the test suite needs (CMake, GoogleTest and
# Chromium from Debian; pytest, hypothesis, onnxruntime and matplotlib from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh

if [[ "${1:-}" == "--test" ]]; then
  if ! command -v cmake >/dev/null || [[ ! -e /usr/include/gtest/gtest.h ]]; then
    _nx_apt_install cmake libgtest-dev
  fi
  # The HTML report is tested in a real headless browser.
  if ! command -v chromium >/dev/null; then
    _nx_apt_install chromium
  fi
  "$PYTHON" -m pip install -q --disable-pip-version-check ".[test]"
else
  "$PYTHON" -m pip install -q --disable-pip-version-check .
fi
