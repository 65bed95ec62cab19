#!/bin/bash
# The GPU check, on a GPU host with no Bazel (packed by tools/make_gpu_bundle.sh).
#   ./run.sh                      every step
#   ./run.sh tests regress ...    some steps: tests regress sanitize bench overhead python
#                                 classes (and, not by default: bench_cnn bench_nets
#                                 bench_nets_auto nets_layers profile torch_bench multi_gpu
#                                 backward backward_layers train)
# Every step's output is appended to $OUT/all.log (default ./out); per-step logs are kept in
# $LOGS (default /tmp/conv2d_logs) and packed into $OUT/logs.tgz at the end.
# Ends with "N passed, N failed" over the steps.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH="$PWD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
OUT="${OUT:-$PWD/out}"
LOGS="${LOGS:-/tmp/conv2d_logs}"
mkdir -p "$OUT" "$LOGS"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests regress sanitize bench overhead python classes)
passed=0
failed=0
failed_names=""

step() {  # step NAME TIMEOUT CMD...   ($LIMIT, if set, caps every step's timeout)
  local name=$1 limit=$2
  [ -n "${LIMIT:-}" ] && [ "$LIMIT" -lt "$limit" ] && limit=$LIMIT
  shift 2
  echo "=== $name: $*"
  local t0=$SECONDS
  echo "=== $name: $*" >> "$OUT/all.log"
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  cat "$LOGS/$name.log" >> "$OUT/all.log"
  tail -n "${TAIL:-15}" "$LOGS/$name.log"
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); echo "=== $name: PASS ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failed_names="$failed_names $name"
    echo "=== $name: FAIL rc=$rc ($((SECONDS - t0)) s)"
  fi
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for s in "${steps[@]}"; do
  case $s in
    tests)
      for t in tests/*; do TAIL=4 step "test_$(basename "$t")" 900 "$t"; done ;;
    regress)
      step regress 900 bin/regress --testdata=testdata ;;
    sanitize)
      # memcheck over the golden files (the fp64 oracle is skipped on the big sampled cases to
      # keep the time bounded; it runs unsanitized in `regress`), and over the C ABI's errors.
      step sanitize_regress 900 compute-sanitizer --tool memcheck --error-exitcode 99 \
        bin/regress --testdata=testdata --skip_oracle_above=20000000
      step sanitize_c_api 300 compute-sanitizer --tool memcheck --error-exitcode 99 tests/c_api_test
      step racecheck 600 compute-sanitizer --tool racecheck --error-exitcode 99 \
        bin/regress --testdata=testdata --filter=_s300
      # The kernels that hand shared memory on through mbarriers and named barriers.
      step synccheck 600 compute-sanitizer --tool synccheck --error-exitcode 99 \
        bin/regress --testdata=testdata --filter=_s300
      # The Python package's fast path (the installed wheel: run the python step first), with
      # PyTorch's caching allocator off so that every tensor and workspace is its own allocation.
      # (test_functional.py as well took over 300 s under memcheck on an H100 host, unfinished.)
      step sanitize_python 600 env -u LD_LIBRARY_PATH PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
        compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest -q \
        -p no:cacheprovider python/tests/test_fast_path.py ;;
    bench)
      step bench 900 bin/benchmark --json_out="$OUT/bench.json" ;;
    backward)
      # The backward (dgrad, wgrad; not by default): determinism over the registry, the backward
      # kernels' tests (fp64 on many shapes, every input class, bitwise determinism), the C ABI's,
      # every variant over the backward's golden files and memcheck over the small ones, then
      # KernelBot's and the nets suite's three operations against cuDNN's fastest of each, and the
      # forward before the backward's changes (bin/benchmark_base, when the bundle carries one:
      # tools/make_gpu_subset.sh) against now in the same call.
      for t in determinism_test implicit_gemm_3xtf32_test depthwise_backward_test c_api_test \
          implicit_gemm_wgmma_test implicit_gemm_wgmma_wgrad_test; do
        [ -x "tests/$t" ] && TAIL=4 step "test_$t" 600 "tests/$t"
      done
      step regress_backward 600 bin/regress --testdata=testdata --filter=grad
      step sanitize_backward 600 compute-sanitizer --tool memcheck --error-exitcode 99 \
        bin/regress --testdata=testdata --filter=grad_s7 \
        --variants=auto,direct,implicit_gemm_3xtf32,implicit_gemm_wgmma,depthwise
      step bench_train 600 bin/benchmark --op=train --variants=cudnn,auto --classes=false \
        --json_out="$OUT/bench_train.json"
      if [ -x bin/benchmark_base ]; then
        for suite in kernelbot cnn; do
          step "forward_base_$suite" 300 bin/benchmark_base --suite=$suite --variants=auto \
            --classes=false --json_out="$OUT/fwd_base_$suite.json"
          step "forward_now_$suite" 300 bin/benchmark --suite=$suite --variants=auto \
            --classes=false --json_out="$OUT/fwd_now_$suite.json"
        done
      fi
      step bench_nets_train 900 bin/benchmark --suite=nets --op=train --variants=cudnn,auto \
        --classes=false --cooldown=0.2 --json_out="$OUT/bench_nets_train.json" ;;
    backward_layers)
      # The backward's slowest layers one by one (not by default; PERF.md round 100): ResNet-50's
      # and EfficientNet-B0's wgrads on each wgrad kernel (implicit_gemm_3xtf32 on mma.sync,
      # implicit_gemm_wgmma) against cuDNN and auto, and the strided dgrads (1x1/2, ConvNeXt's
      # 2x2/2 downsamplers, EfficientNet's four strided depthwise, the three stems) against cuDNN,
      # with implicit_gemm_wgmma's two dgrad forms forced (the stride phases, the fold).
      step backward_wgrad_layers 300 bin/benchmark --op=wgrad --classes=false --cooldown=0.1 \
        --variants=cudnn,implicit_gemm_3xtf32,implicit_gemm_wgmma,auto \
        --json_out="$OUT/backward_wgrad_layers.json" --shape="32,64,64,56,56,3,3,pad=1;\
32,64,64,56,56,1,1;32,64,256,56,56,1,1;32,256,64,56,56,1,1;32,256,512,56,56,1,1,stride=2;\
32,128,128,28,28,3,3,pad=1;32,256,256,14,14,3,3,pad=1;32,512,512,7,7,3,3,pad=1;\
32,1024,256,14,14,1,1;32,24,144,56,56,1,1;32,16,96,112,112,1,1;32,1152,48,1,1,1,1,bias"
      step backward_dgrad_layers 300 bin/benchmark --op=dgrad --classes=false --cooldown=0.1 \
        --variants=cudnn,auto,implicit_gemm_wgmma_dgrad_phases,implicit_gemm_wgmma_dgrad_fold \
        --json_out="$OUT/backward_dgrad_layers.json" \
        --shape="32,256,512,56,56,1,1,stride=2;32,1024,2048,14,14,1,1,stride=2;\
32,96,192,56,56,2,2,stride=2;32,192,384,28,28,2,2,stride=2;32,384,768,14,14,2,2,stride=2;\
32,96,96,112,112,3,3,pad=1,stride=2,groups=96;32,144,144,56,56,5,5,pad=2,stride=2,groups=144;\
32,240,240,28,28,3,3,pad=1,stride=2,groups=240;32,672,672,14,14,5,5,pad=2,stride=2,groups=672;\
32,3,64,224,224,7,7,pad=3,stride=2;32,3,32,224,224,3,3,pad=1,stride=2;32,3,96,224,224,4,4,stride=4" ;;
    bench_cnn)
      step bench_cnn 900 bin/benchmark --suite=cnn --json_out="$OUT/bench_cnn.json" ;;
    bench_nets)
      # ResNet-50, ConvNeXt-T, EfficientNet-B0 layer by layer, per-network totals vs cuDNN,
      # every variant (~18 minutes: longer than one device call may run).
      step bench_nets 1800 bin/benchmark --suite=nets --json_out="$OUT/bench_nets.json" ;;
    bench_nets_auto)
      # The same per-network totals from auto and cuDNN only, and fft_depthwise's own time on
      # the depthwise layers (37 s on an H100 with --classes=false, PERF.md round 92; the
      # classes column adds each case's input classes and their GPU fp64 references).
      step bench_nets_auto 900 bin/benchmark --suite=nets --variants=cudnn,auto,fft_depthwise \
        --json_out="$OUT/bench_nets_auto.json" ;;
    nets_layers)
      # The nets suite's table against torchvision's models (needs torch and torchvision).
      step nets_layers 300 python3 nets_layers.py --benchmark bin/benchmark ;;
    profile)
      # Per-kernel device time of the FFT variants on the largest KernelBot case (one call each).
      step profile 600 ncu --clock-control none --metrics gpu__time_duration.sum \
        --print-summary per-kernel bin/benchmark --shape=1,128,128,256,256,32,32 \
        --variants="${PROFILE_VARIANTS:-fft_tiled}" --calls=1 --warmup=0 ;;
    overhead)
      # Host time per call: Plan::Run through the graphs and plainly, and each launch path.
      step host_overhead 120 bin/host_overhead
      step host_overhead_plain 120 env CONV2D_GRAPHS=0 bin/host_overhead
      step launch_cost 120 bin/launch_cost ;;
    classes)
      # Worst ratio per variant and input class, every output checked (docs/PERF.md's table).
      step input_classes 900 bin/input_classes --shapes=all ;;
    python)
      # The wheel, as a user installs it (pip install --no-deps into the python3 that has
      # PyTorch), then everything from Python with LD_LIBRARY_PATH unset: conv2d imports with no
      # environment at all, its libconv2d.so resolves Abseil inside the package (ldd), the
      # package's pytest suite, KernelBot's entry (kernelbot.py) and its tests.
      python3 -m pip uninstall -q -y conv2d >/dev/null 2>&1  # nothing left from an older wheel
      step wheel_install 300 python3 -m pip install -q --no-deps --force-reinstall \
        --disable-pip-version-check python/conv2d-*.whl
      step wheel_import 60 env -i PATH="$PATH" python3 -c 'import conv2d, torch
print(conv2d.__file__, conv2d.device_status(), torch.cuda.get_device_name())
assert conv2d.device_status() == "ok"'
      step wheel_ldd 60 bash -c 'set -eo pipefail
        lib=$(env -i PATH="$PATH" python3 -c "import conv2d; print(conv2d.library_path())")
        ./check_self_contained.sh "$lib"'
      step python_pytest 900 env -u LD_LIBRARY_PATH python3 -m pytest -q -p no:cacheprovider \
        python/tests
      # Again with the fast path (python/fast_path.cc) off: every call through Python and ctypes.
      step python_pytest_no_fast_path 900 env -u LD_LIBRARY_PATH CONV2D_FAST_PATH=0 python3 -m \
        pytest -q -p no:cacheprovider python/tests
      step kernelbot 600 env -u LD_LIBRARY_PATH python3 kernelbot.py --seeds "${SEEDS:-5}"
      step kernelbot_pytest 300 env -u LD_LIBRARY_PATH python3 -m pytest -q -p no:cacheprovider \
        kernelbot_test.py ;;
    multi_gpu)
      # Two or more GPUs (not by default: fails on one): the C++ test, the package's multi-GPU
      # tests, data-parallel training through torch.distributed (NCCL).
      for t in multi_gpu/*; do TAIL=6 step "multi_gpu_$(basename "$t")" 600 "$t"; done
      step python_multi_gpu 600 env -u LD_LIBRARY_PATH python3 -m pytest -q -p no:cacheprovider \
        python/tests_multi_gpu
      step ddp_train 900 env -u LD_LIBRARY_PATH python3 ddp_train.py ;;
    train)
      # Training from PyTorch (after the python step, which installs the wheel): a converted
      # model's step against the plain one's (examples/train.py: ResNet-50, EfficientNet-B0,
      # ConvNeXt-T; eager), the host time per training call against F.conv2d's (also in pieces),
      # EfficientNet-B0's step under torch.profiler, and one
      # process's bitwise gradients under use_deterministic_algorithms (ddp_train.py --gpus 1).
      for m in resnet50 efficientnet_b0 convnext_tiny; do
        step "train_$m" 300 env -u LD_LIBRARY_PATH python3 train.py --model $m --steps 12
      done
      step train_overhead 120 env -u LD_LIBRARY_PATH python3 train_overhead.py
      step host_pieces 120 env -u LD_LIBRARY_PATH python3 host_pieces.py
      step step_profile 300 env -u LD_LIBRARY_PATH python3 step_profile.py efficientnet_b0
      step ddp_one_gpu 300 env -u LD_LIBRARY_PATH python3 ddp_train.py --gpus 1 --steps 10 ;;
    torch_bench)
      # Host time per call, KernelBot through the package, ResNet-50 converted (eager, compiled).
      step torch_bench 1200 env -u LD_LIBRARY_PATH python3 torch_bench.py \
        --json_out="$OUT/torch_bench.json" ;;
    *)
      echo "unknown step $s"; failed=$((failed + 1)) ;;
  esac
done
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
echo "failed steps:${failed_names:- none}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
