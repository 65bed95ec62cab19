#!/bin/bash
# Builds every test, the regression tool, the benchmark and libconv2d.so, and packs them with the
# golden files and a runner into gpu_bundle/ (git-ignored), for a GPU host that has no Bazel:
#   tools/make_gpu_bundle.sh            # here
#   gpu_bundle/run.sh [STEP...]         # there; STEP: tests regress sanitize bench python ... (all)
# It also writes gpu_bundle.txz (the same, xz -9: ~12 MB, since every test binary carries the
# same device code and xz's 64 MB window stores it once; gzip's 32 KB window gave 57 MB) for hosts
# reached by copying a file:
#   tar xJf gpu_bundle.txz && gpu_bundle/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=gpu_bundle
tests=$(bazel query 'kind("cc_test", //conv/... + //reference/... + //tools/...)' 2>/dev/null)
bazel build $tests //tools:regress //tools:benchmark //tools:mix_kernels //tools:host_overhead //tools:input_classes \
  //tools:launch_cost //conv:libconv2d.so //python:wheel
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/tests" "$BUNDLE/lib" "$BUNDLE/testdata" "$BUNDLE/python" \
  "$BUNDLE/multi_gpu"
for t in $tests; do
  path="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  case "$t" in
    *multi_gpu*) cp "$path" "$BUNDLE/multi_gpu/" ;;  # needs two GPUs: run.sh's multi_gpu step
    *) cp "$path" "$BUNDLE/tests/" ;;
  esac
done
cp bazel-bin/tools/regress bazel-bin/tools/benchmark bazel-bin/tools/mix_kernels bazel-bin/tools/host_overhead bazel-bin/tools/input_classes \
  bazel-bin/tools/launch_cost "$BUNDLE/bin/"
cp bazel-bin/conv/libconv2d.so "$BUNDLE/lib/"
cp testdata/*.golden "$BUNDLE/testdata/"
cp bazel-bin/python/conv2d-*.whl "$BUNDLE/python/"
cp -r python/tests python/tests_multi_gpu "$BUNDLE/python/"
cp tools/kernelbot.py tools/kernelbot_test.py tools/nets_layers.py tools/torch_bench.py tools/ddp_train.py \
  tools/train_overhead.py tools/host_pieces.py tools/step_profile.py examples/train.py \
  tools/check_self_contained.sh \
  tools/gpu_run.sh "$BUNDLE/"
mv "$BUNDLE/gpu_run.sh" "$BUNDLE/run.sh"
# The shared libraries that are not on a CUDA host: Debian's Abseil and Google Benchmark.
for f in "$BUNDLE"/bin/* "$BUNDLE"/tests/* "$BUNDLE"/multi_gpu/* "$BUNDLE"/lib/libconv2d.so; do
  ldd "$f" | awk '/=> \// {print $3}' | grep -E 'libabsl_|libbenchmark' || true
done | sort -u | while read -r lib; do cp -L "$lib" "$BUNDLE/lib/"; done
chmod -R u+w "$BUNDLE"
tar -cf - "$BUNDLE" | xz -9 -T0 > "$BUNDLE.txz"
echo "bundle: $(du -sh "$BUNDLE" | cut -f1) in $BUNDLE ($(ls "$BUNDLE/tests" | wc -l) tests)," \
  "$(du -sh "$BUNDLE.txz" | cut -f1) as $BUNDLE.txz"
