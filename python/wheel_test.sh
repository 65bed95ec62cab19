#!/bin/bash
# The wheel on a machine with no GPU: installs into a fresh virtual environment, imports with an
# empty environment, says why it cannot compute here, ships its own Abseil. See python/BUILD.
set -euo pipefail
wheel="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
meta_test="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
check="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"  # tools/check_self_contained.sh
loading_test="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
pack="$(cd "$(dirname "$5")" && pwd)/$(basename "$5")"  # tools/pack_shared_library.py
expect="$6"  # with_fast_path, or without_fast_path (--define=conv2d_fast_path=off)
# tools/deps.bzl's and python/BUILD's: TORCH_VERSION, TORCH_PYTHON, the module, TORCH_LIBRARIES
torch_version="$7" torch_python="$8" module="$9" torch_libraries="${10}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
venv="$tmp/venv"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check "$wheel"
# Root-Is-Purelib: false, so the package goes to platlib.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
# Installed: the package's modules, the library and the Abseil libraries it names.
files=$("$venv/bin/python" -m pip show -f conv2d | sed -n '/^Files:/,$p')
for f in __init__.py _native.py functional.py nn.py lib/libconv2d.so; do
  echo "$files" | grep -q "conv2d/$f\$" || { echo "FAIL: the wheel installed no conv2d/$f"; exit 1; }
  [ -f "$site/conv2d/$f" ] || { echo "FAIL: $site/conv2d/$f is missing"; exit 1; }
done
echo "installed $(echo "$files" | grep -c 'conv2d/') files into $site"

# The fast path (python/fast_path.cc): no RUNPATH, and it names only PyTorch's libraries (loaded
# by `import torch` before it) and the system's (the check python/BUILD's packing made).
fast=$(ls "$site"/conv2d/_fast_torch*.cpython-*-x86_64-linux-gnu.so 2>/dev/null || true)
if [ "$expect" = without_fast_path ]; then
  [ -z "$fast" ] || { echo "FAIL: built without the fast path, yet the wheel has $fast"; exit 1; }
  echo "NOTE: built with --define=conv2d_fast_path=off: no fast path in the wheel, NOT TESTED"
else
  [ -n "$fast" ] || { echo "FAIL: no fast path installed"; exit 1; }
  echo "$files" | grep -q "conv2d/$(basename "$fast")\$" || { echo "FAIL: no fast path installed"; exit 1; }
  if readelf -d "$fast" | grep -qE 'RPATH|RUNPATH'; then
    echo "FAIL: $fast has a RUNPATH"; exit 1
  fi
  # shellcheck disable=SC2086  # the names (comma-separated), one argument each
  python3 "$pack" --check_only "$fast" --allow_needed ${torch_libraries//,/ } ||
    { echo "FAIL: the fast path needs more than PyTorch's and the system's libraries"; exit 1; }
  echo "fast path $(basename "$fast"): no RUNPATH; NEEDED only PyTorch's and the system's libraries"
fi

"$check" "$site/conv2d/lib/libconv2d.so"

# Import with no environment at all (no LD_LIBRARY_PATH, no PYTHONPATH), from another folder.
cd "$tmp"
env -i PATH="/usr/bin:/bin" "$venv/bin/python" - <<'PY'
import conv2d
print("conv2d", conv2d.__version__, "from", conv2d.__file__)
names = conv2d.algorithms()
assert "auto" not in names and "fft_fused" in names and "direct" in names, names
print(f"{len(names)} algorithms: {', '.join(names)}")
status = conv2d.device_status()
print("device_status:", status)
try:
    import torch  # noqa: F401
    has_torch = True
except ImportError:
    has_torch = False
if not has_torch:
    try:
        conv2d.conv2d(None, None)
    except ImportError as e:
        print("without PyTorch, conv2d.conv2d says:", e)
    else:
        raise AssertionError("conv2d.conv2d ran without PyTorch")
import shutil, subprocess
gpu = shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"],
                                                    capture_output=True).returncode == 0
if not gpu:
    # The library's own words for a machine with no usable device, not a crash.
    assert status != "ok" and "device" in status.lower(), status
PY

# With PyTorch: the op's registration and its fake (meta) implementation (test_meta.py) and the
# fast path's loading rules (test_fast_path_loading.py), the package from the same wheel. The
# PyTorch is $CONV2D_TORCH_PYTHON's (tools/torch_cpu_env.sh: the release and Python the fast
# path is built for, which must then import for real), else this machine's python3's if it has
# one.
torch_py="${CONV2D_TORCH_PYTHON:-}"
if [ -z "$torch_py" ] && python3 -c 'import torch' 2>/dev/null; then torch_py=python3; fi
if [ -n "$torch_py" ]; then
  export LD_LIBRARY_PATH="${CUDA_PATH:-/usr/local/cuda}/lib64"  # PyTorch's CUDA libraries
  site_torch="$tmp/site_torch"
  rm -rf "$site_torch"
  "$torch_py" -m pip install -q --no-index --no-deps --disable-pip-version-check \
    --target "$site_torch" "$wheel"
  built_for=$(PYTHONPATH="$site_torch" "$torch_py" -c 'import sys, torch
print("%d.%d" % sys.version_info[:2] == sys.argv[1] and
      torch.__version__.split("+")[0] == sys.argv[2])' "$torch_python" "$torch_version")
  if [ "$expect" = without_fast_path ]; then
    echo "NOTE: no fast path in this wheel: its import NOT TESTED"
  elif [ "$built_for" = True ]; then
    PYTHONPATH="$site_torch" "$torch_py" -c 'import importlib, sys, torch
m = importlib.import_module("conv2d." + sys.argv[1])
print("fast path imports against PyTorch", torch.__version__, "->", m.TORCH_VERSION)' "$module"
  else
    echo "NOTE: $torch_py is not Python $torch_python with PyTorch $torch_version: the fast path's"
    echo "NOTE: import NOT TESTED"
  fi
  if "$torch_py" -c 'import pytest' 2>/dev/null; then
    # Beside the loading test: the ops' C++ kernels swapped in (test_fast_path_ops_meta.py).
    PYTHONPATH="$site_torch" "$torch_py" -m pytest -q -p no:cacheprovider "$meta_test" \
      "$loading_test" "$(dirname "$loading_test")/test_fast_path_ops_meta.py"
  else
    PYTHONPATH="$site_torch" "$torch_py" "$meta_test"
    echo "NOTE: no pytest for $torch_py: test_fast_path_loading.py NOT TESTED here"
  fi
else
  echo "NOTE: NOT TESTED HERE: no PyTorch (set CONV2D_TORCH_PYTHON: tools/torch_cpu_env.sh), so"
  echo "NOTE: the op's registration and fake implementation (python/tests/test_meta.py) and the"
  echo "NOTE: fast path's loading (test_fast_path_loading.py) did not run; they run where PyTorch"
  echo "NOTE: is installed (the GPU host's python step runs them in python/tests)"
fi
echo PASS
