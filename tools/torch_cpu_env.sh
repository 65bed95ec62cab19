#!/bin/bash
# A Python environment with the PyTorch release the Python package's fast path is built for
# (tools/deps.bzl: TORCH_VERSION 2.11.0, TORCH_PYTHON 3.12), for the package's CPU tests: with
# $CONV2D_TORCH_PYTHON set to its python (.ci/run sets it; .bazelrc passes it to tests),
# //python:wheel_test imports the wheel's fast path against that real PyTorch and runs
# python/tests/test_meta.py (the op and its fake implementation on meta tensors, torch.compile,
# convert) and test_fast_path_loading.py. PyTorch's CUDA build imports on a machine with no GPU;
# its CUDA libraries come from the toolkit ($CUDA_PATH/lib64), and the three it needs that the
# toolkit lacks from PyPI. About 1.5 GB from PyPI, once.
#   tools/torch_cpu_env.sh [VENV]      prints the environment's python
set -euo pipefail
venv="${1:-$HOME/.cache/conv2d/torch2.11.0-py3.12}"
cuda="${CUDA_PATH:-/usr/local/cuda}"
check() { LD_LIBRARY_PATH="$cuda/lib64" "$venv/bin/python" -c \
  'import torch, sys; assert torch.__version__.split("+")[0] == "2.11.0", torch.__version__
assert sys.version_info[:2] == (3, 12), sys.version' >/dev/null 2>&1; }
if [ -x "$venv/bin/python" ] && check; then echo "$venv/bin/python"; exit 0; fi
py=""
for c in $(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null) \
    "$(command -v python3.12 || true)"; do  # (pyenv's shim answers but may not run)
  if [ -n "$c" ] && "$c" -c pass 2>/dev/null; then py="$c"; break; fi
done
if [ -z "$py" ]; then
  echo "torch_cpu_env: no Python 3.12 (python3.12 on PATH or pyenv's)" >&2
  exit 1
fi
rm -rf "$venv"
"$py" -m venv "$venv" >&2
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" --no-deps torch==2.11.0 >&2
# torch's own Python requirements (its METADATA), pytest, and of its CUDA libraries the three
# the CUDA 13.0 toolkit does not carry (the versions its METADATA names).
"${pip[@]}" filelock "fsspec>=0.8.5" jinja2 "networkx>=2.5.1" "sympy>=1.13.3" \
  "typing-extensions>=4.10.0" "setuptools<82" numpy pytest >&2  # (pip notes triton's absence)
"${pip[@]}" --no-deps "nvidia-cufile>=1.15,<2" nvidia-cusparselt-cu13==0.8.0 \
  nvidia-nvshmem-cu13==3.4.5 >&2
check || { echo "torch_cpu_env: PyTorch 2.11.0 does not import in $venv" >&2; exit 1; }
echo "$venv/bin/python"
