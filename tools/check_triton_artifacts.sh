#!/bin/bash
# CI: the checked-in Triton artifacts (conv/algorithms/triton/artifacts/) are exactly what
# tools/triton_compile.py makes from the checked-in kernels with triton==3.6.0. Installs that
# Triton with pip if it is absent (no GPU needed), recompiles into a temporary folder and
# compares byte for byte: the compile is reproducible (line info off, no paths or hashes in
# the metadata written), checked by compiling twice from two different checkouts.
# Exit status 0 when they match.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
want=3.6.0
have=$("$PYTHON" -c 'import triton; print(triton.__version__)' 2>/dev/null || true)
if [ "$have" != "$want" ]; then
  echo "installing triton==$want (found: ${have:-none})"
  "$PYTHON" -m pip install --quiet "triton==$want"
fi
"$PYTHON" tools/triton_compile.py --check
