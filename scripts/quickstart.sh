#!/usr/bin/env bash
# Installs neurenix IPU, then compiles and runs a real model on the simulated
# IPU and prints its outputs and reports.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
scripts/install.sh
exec "$PYTHON" examples/quickstart.py
