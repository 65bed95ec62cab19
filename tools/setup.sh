#!/bin/sh
# Installs what conv2d needs from Debian's packages. Idempotent: does nothing when all is there.
# The CUDA toolkit is not a Debian package: it must already be at $CUDA_PATH or /usr/local/cuda.
set -eu
PACKAGES="bazel-bootstrap default-jdk-headless libabsl-dev libgtest-dev libbenchmark-dev libeigen3-dev
  nlohmann-json3-dev patchelf python3-venv"
missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
else
  echo "setup: Debian packages already installed"
fi
cuda="${CUDA_PATH:-/usr/local/cuda}"
if [ ! -x "$cuda/bin/nvcc" ]; then
  echo "setup: no CUDA toolkit at $cuda (set CUDA_PATH); the build needs CUDA 12.0 or newer" >&2
  exit 1
fi
echo "setup: CUDA toolkit: $("$cuda/bin/nvcc" --version | grep release)"
