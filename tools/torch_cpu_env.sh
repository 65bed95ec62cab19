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
deps="$(dirname "$0")/deps.bzl"  # the versions, from where the build takes them
torch_version=$(sed -n 's/^TORCH_VERSION = "\(.*\)"$/\1/p' "$deps")
python_version=$(sed -n 's/^TORCH_PYTHON = "\(.*\)"$/\1/p' "$deps")
[ -n "$torch_version" ] && [ -n "$python_version" ] ||
  { echo "torch_cpu_env: no TORCH_VERSION / TORCH_PYTHON in $deps" >&2; exit 1; }
venv="${1:-$HOME/.cache/conv2d/torch$torch_version-py$python_version}"
cuda="${CUDA_PATH:-/usr/local/cuda}"
check() { LD_LIBRARY_PATH="$cuda/lib64" "$venv/bin/python" -c \
  'import torch, sys; assert torch.__version__.split("+")[0] == sys.argv[1], torch.__version__
assert "%d.%d" % sys.version_info[:2] == sys.argv[2], sys.version' \
  "$torch_version" "$python_version" >/dev/null 2>&1; }
if [ -x "$venv/bin/python" ] && check; then echo "$venv/bin/python"; exit 0; fi
py=""
for c in $(ls -d "$HOME"/.pyenv/versions/"$python_version"*/bin/python"$python_version" \
    2>/dev/null) "$(command -v python"$python_version" || true)"; do  # (pyenv's shim may not run)
  if [ -n "$c" ] && "$c" -c pass 2>/dev/null; then py="$c"; break; fi
done
if [ -z "$py" ]; then
  echo "torch_cpu_env: no Python $python_version (python$python_version on PATH or pyenv's)" >&2
  exit 1
fi
rm -rf "$venv"
"$py" -m venv "$venv" >&2
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" --no-deps "torch==$torch_version" >&2
# torch's own Python requirements (its METADATA), pytest, and of its CUDA libraries the three
# the CUDA 13.0 toolkit does not carry (the versions its METADATA names).
"${pip[@]}" filelock "fsspec>=0.8.5" jinja2 "networkx>=2.5.1" "sympy>=1.13.3" \
  "typing-extensions>=4.10.0" "setuptools<82" numpy pytest >&2  # (pip notes triton's absence)
"${pip[@]}" --no-deps "nvidia-cufile>=1.15,<2" nvidia-cusparselt-cu13==0.8.0 \
  nvidia-nvshmem-cu13==3.4.5 >&2
check || { echo "torch_cpu_env: PyTorch $torch_version does not import in $venv" >&2; exit 1; }
echo "$venv/bin/python"
