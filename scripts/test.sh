#!/usr/bin/env bash
# Installs neurenix IPU and its test tools, then runs the whole test suite:
# Rust (cargo test), C++ (GoogleTest via CMake/CTest, also built with ASan and
# UBSan) and Python (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

scripts/install.sh --test

echo "== cargo test"
cargo test --locked -p neurenix-core -p neurenix-sys

echo "== C++ unit tests (GoogleTest)"
cmake -S cpp -B build/cpp -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/cpp -j "$JOBS" >/dev/null
ctest --test-dir build/cpp --output-on-failure -j "$JOBS"

echo "== C++ unit tests under AddressSanitizer and UndefinedBehaviorSanitizer"
cmake -S cpp -B build/cpp-asan -DCMAKE_BUILD_TYPE=Release -DNEURENIX_SANITIZE=ON >/dev/null
cmake --build build/cpp-asan -j "$JOBS" >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build/cpp-asan --output-on-failure -j "$JOBS"

echo "== pytest"
# Run from outside the source tree so the installed package is the one tested.
(cd tests && "$PYTHON" -m pytest -q "$@")
nx_venv_hint
