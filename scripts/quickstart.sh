#!/usr/bin/env bash
# Installs neurenix IPU, then compiles and runs a real model on the simulated
# IPU and prints its outputs and reports.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh
scripts/install.sh
"$PYTHON" examples/quickstart.py
nx_venv_hint
