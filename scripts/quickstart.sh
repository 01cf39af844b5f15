#!/usr/bin/env bash
# Installs neurenix IPU, then compiles ResNet-50 for a simulated IPU, runs it
# there and prints whether it fits, memory, estimates, how its outputs compare
# with onnxruntime's, and where the report is (examples/quickstart.py).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh
scripts/install.sh
# The comparison uses onnxruntime when it is installed (else onnx's reference evaluator).
if ! "$PYTHON" -c "import onnxruntime" >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --disable-pip-version-check onnxruntime \
    || echo "== onnxruntime could not be installed; the quickstart compares with onnx's reference evaluator instead"
fi
"$PYTHON" examples/quickstart.py
nx_venv_hint
