#!/bin/bash
# A subset of the GPU bundle for a device call whose carry is small (the lent GPU hosts take at
# most 64 MiB with the working tree): run.sh, the tools and the named tests, Abseil's libraries,
# xz-compressed with a 64 MiB window (every binary carries the same device code, stored once).
#   tools/make_gpu_subset.sh OUT.txz TEST...    after tools/make_gpu_bundle.sh
# There: tar xJf OUT.txz && cp -r testdata gpu_bundle/ && gpu_bundle/run.sh STEP...
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
shift
tmp=$(mktemp -d)
mkdir -p "$tmp/gpu_bundle/tests"
cp -r gpu_bundle/run.sh gpu_bundle/bin gpu_bundle/lib "$tmp/gpu_bundle/"
for t in "$@"; do cp "gpu_bundle/tests/$t" "$tmp/gpu_bundle/tests/"; done
tar -C "$tmp" -cf - gpu_bundle | xz -9e -T1 > "$out"
rm -rf "$tmp"
echo "$out: $(du -h "$out" | cut -f1)"
