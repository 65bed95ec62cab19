// "fft_fused": fft_tiled's overlap-save FFT convolution with its cuFFT transforms and the pad,
// gather and crop kernels replaced by three fused shared-memory FFT kernels (their bodies, the
// index algebra and the planning are in fft_fused_internal.h, shared with the CPU tests):
//   filter kernel (w -> filter spectrum) -> input kernel (x -> input spectrum)
//   -> per-frequency CGEMM (conj of the filter spectrum) -> inverse kernel (-> y).
// The spectra are frequency-major exactly as fft_tiled's, so the channel mix is unchanged: cuBLAS
// fp32 CGEMM, or for "fft_fused_3xtf32" cgemm_3xtf32's split-precision tensor-core kernel.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/fft/cgemm_3xtf32.h"
#include "conv/arch/cp_async.cuh"
#include "conv/core/cublas_handle.h"
#include "conv/core/cuda_status.h"
#include "conv/algorithms/fft/fft_algorithm.h"
#include "conv/algorithms/fft/fft_fused.h"
#include "conv/algorithms/fft/fft_fused_internal.h"
#include "conv/algorithms/fft/fft_fused_stages.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace fft_fused {
namespace {

// The CTA's view for the kernel bodies: its shared memory, its threads, its barrier.
struct DeviceCtx {
  Cf* data;
  Cf* tw;
  TransformMeta* meta_;
  TransformStats* stats_;
  StatSlot* slots_;
  bool any_ = false;  // this thread's vote for the next SyncAny

  __device__ Cf Ld(int i) const { return data[i]; }
  __device__ void St(int i, Cf v) const { data[i] = v; }
  // Element i = (*re, *im), each zero where not ok, copied by cp.async (see LoadRowsItem).
  __device__ void CopyIn(int i, const float* re, bool ok_re, const float* im, bool ok_im) const {
    float* d = reinterpret_cast<float*>(data + i);
    CpAsync<4>(d, re, ok_re);
    CpAsync<4>(d + 1, im, ok_im);
  }
  // This thread's copies have landed (the barrier after it publishes them to the CTA).
  __device__ void WaitCopies() const {
    CpAsyncCommit();
    CpAsyncWait<0>();
  }
  __device__ Cf Tw(int k) const { return tw[k]; }
  __device__ void SetTw(int k, Cf v) const { tw[k] = v; }
  __device__ TransformMeta* meta() const { return meta_; }
  __device__ TransformStats* transform_stats() const { return stats_; }
  __device__ StatSlot* stat_slots() const { return slots_; }
  // One part (imaginary if `imag`) of element i: atomically added to, or set (each part has one
  // writer).
  __device__ void AddData(int i, bool imag, float v) const {
    atomicAdd(reinterpret_cast<float*>(data + i) + (imag ? 1 : 0), v);
  }
  __device__ void SetPart(int i, bool imag, float v) const {
    reinterpret_cast<float*>(data + i)[imag ? 1 : 0] = v;
  }
  __device__ void Flag() { any_ = true; }
  // Returns once the kernel this one was launched after has finished, its writes visible
  // (pdl.cuh; at once where it was launched plainly).
  __device__ void WaitForPriorKernel() const { PdlWait(); }
  // A barrier that returns whether any thread called Flag() since the last one.
  __device__ bool SyncAny(const char*) {
    const bool any = __syncthreads_or(any_) != 0;
    any_ = false;
    return any;
  }
  // Item i on thread i % kThreads, as whole rounds of kThreads items and then a partial one:
  // when n is a compile-time constant (pinned kernels) the rounds unroll and each item's index
  // arithmetic folds against threadIdx.x.
  template <class F>
  __device__ void ForEach(int n, F&& f) const {
    const int tid = static_cast<int>(threadIdx.x);
    __builtin_assume(tid < kThreads);  // lets item < n fold in the unrolled rounds
    const int rounds = n / kThreads;
#pragma unroll
    for (int r = 0; r < rounds; ++r) f(r * kThreads + tid);
    const int i = rounds * kThreads + tid;
    if (i < n) f(i);
  }
  __device__ void Sync(const char*) const { __syncthreads(); }
};

__device__ DeviceCtx MakeCtx(const KernelParams& k) {
  extern __shared__ float4 smem[];  // float4: 16-byte alignment for the metadata
  DeviceCtx c;
  c.meta_ = reinterpret_cast<TransformMeta*>(smem);
  c.stats_ = reinterpret_cast<TransformStats*>(c.meta_ + 2 * k.pairs);
  c.slots_ = reinterpret_cast<StatSlot*>(c.stats_ + 2 * k.pairs);
  c.tw = reinterpret_cast<Cf*>(c.slots_ + StatSlotCount(k.log2_pairs));
  c.data = c.tw + kTwiddles;
  return c;
}

// kPin: an index into kPinnedTiles (the launch checks that Pin changes no value of k), or -1
// for the generic kernel.
template <int kPin, bool kInverse>
__device__ KernelParams Pinned(const KernelParams& k) {
  if constexpr (kPin >= 0) {
    return Pin<kPin, kInverse>(k);
  } else {
    return k;
  }
}

// CTAs per SM each pinned kernel ran at before CleanTransforms existed (shared memory allows
// six of the 36 KB tiles, 32x32 x4 and 16x64 x4; registers then limited them): held by the
// launch bounds, at the price of a few spilled registers, since the rare paths (inlined) would
// otherwise size the kernels at 64 registers. Out of line (__noinline__) they cost more: the
// call's spills landed on the common path (PERF.md, round 84). Three for the 72 KB tiles, which
// shared memory limits anyway.
enum KernelKind { kFilterKind, kInputKind, kInverseKind };
template <int kPin, KernelKind kKind>
constexpr int MinCtasPerSm() {
  if constexpr (kPin == 1) return 6;                                   // 32x32 x4
  if constexpr (kPin == 4) return kKind == kFilterKind ? 6 : 5;        // 16x64 x4
  return kPin < 0 ? 1 : 3;
}

template <int kPin>
__global__ void __launch_bounds__(kThreads, (MinCtasPerSm<kPin, kFilterKind>())) FilterKernel(KernelParams params,
                                                         const float* __restrict__ w,
                                                         Cf* __restrict__ spectrum,
                                                         SparseLists lists) {
  PdlLaunchDependents();  // the input kernel needs nothing from this one: let it start
  const KernelParams k = Pinned<kPin, false>(params);
  DeviceCtx ctx = MakeCtx(k);
  FilterCta(ctx, k, w, spectrum, lists, static_cast<int>(blockIdx.x));
}

template <int kPin>
__global__ void __launch_bounds__(kThreads, (MinCtasPerSm<kPin, kInputKind>())) InputKernel(KernelParams params,
                                                        const float* __restrict__ x,
                                                        Cf* __restrict__ spectrum,
                                                        SparseLists lists) {
  PdlLaunchDependents();
  const KernelParams k = Pinned<kPin, false>(params);
  DeviceCtx ctx = MakeCtx(k);
  // Its counts and the call's flag are its own or written with the same value by both kernels.
  // Launched right after the filter kernel, whose buffers (w, the filter spectrum) this one does
  // not touch: it overlaps that kernel but for its last step, where it waits for it (for the
  // call's epoch, SparseLists) before publishing its counts; so the mix, which waits for this
  // kernel, also finds the filter spectrum complete.
  InputCta(ctx, k, x, spectrum, lists, static_cast<int>(blockIdx.x));
  PdlWait();  // (InputCta waited already; kept so that no path leaves without it)
}

template <int kPin>
__global__ void __launch_bounds__(kThreads, (MinCtasPerSm<kPin, kInverseKind>())) InverseKernel(KernelParams params,
                                                          const Cf* __restrict__ spectrum,
                                                          float* __restrict__ y,
                                                          SparseInputs sparse) {
  PdlWait();  // the output spectrum comes from the mix (the last kernel: no early trigger)
  const KernelParams k = Pinned<kPin, true>(params);
  DeviceCtx ctx = MakeCtx(k);
  InverseCta(ctx, k, spectrum, y, sparse, static_cast<int>(blockIdx.x));
}

using ForwardKernelFn = void (*)(KernelParams, const float*, Cf*, SparseLists);
using InverseKernelFn = void (*)(KernelParams, const Cf*, float*, SparseInputs);
static_assert(kNumPinned == 5, "list every pinned kernel below");
// [0]: generic; [1 + i]: kPinnedTiles[i].
constexpr ForwardKernelFn kFilterKernels[] = {FilterKernel<-1>, FilterKernel<0>, FilterKernel<1>,
                                              FilterKernel<2>, FilterKernel<3>, FilterKernel<4>};
constexpr ForwardKernelFn kInputKernels[] = {InputKernel<-1>, InputKernel<0>, InputKernel<1>,
                                             InputKernel<2>, InputKernel<3>, InputKernel<4>};
constexpr InverseKernelFn kInverseKernels[] = {InverseKernel<-1>, InverseKernel<0>,
                                               InverseKernel<1>, InverseKernel<2>,
                                               InverseKernel<3>, InverseKernel<4>};

// AllowOptinSmem, with the carveout at its maximum so that several CTAs fit per SM.
absl::Status AllowSmem(const void* kernel, int optin) {
  RETURN_IF_ERROR(AllowOptinSmem(kernel, optin,
                                 "fft_fused: cudaFuncSetAttribute(MaxDynamicSharedMemorySize)"));
  return CudaStatus(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared),
                    "fft_fused: cudaFuncSetAttribute(PreferredSharedMemoryCarveout)");
}

class FftFusedRunner : public StagedRunner {
 public:
  FftFusedRunner(const Shape& shape, const Options& options, const Config& config)
      : shape_(shape),
        options_(options),
        config_(config),
        fwd_(MakeKernelParams(shape, config, /*inverse=*/false)),
        inv_(MakeKernelParams(shape, config, /*inverse=*/true)),
        filter_kernel_(kFilterKernels[1 + PinnedIndex(fwd_, /*inverse=*/false)]),
        input_kernel_(kInputKernels[1 + PinnedIndex(fwd_, /*inverse=*/false)]),
        inverse_kernel_(kInverseKernels[1 + PinnedIndex(inv_, /*inverse=*/true)]) {}
  FftFusedRunner(const FftFusedRunner&) = delete;
  FftFusedRunner& operator=(const FftFusedRunner&) = delete;

  absl::Status Init(const DeviceInfo& device) {
    const int optin = static_cast<int>(device.shared_memory_per_block_optin);
    const size_t need = std::max(config_.smem.bytes_fwd, config_.smem.bytes_inv);
    if (need > static_cast<size_t>(optin)) {
      // A limit of this GPU, not of the shape (the plan assumes sm_90's 227 KB): "auto" then
      // moves on to its next choice.
      return absl::FailedPreconditionError(absl::StrCat("fft_fused: needs ", need,
                                                        " bytes of shared memory per block, the "
                                                        "device allows ",
                                                        optin));
    }
    RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(filter_kernel_), optin));
    RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(input_kernel_), optin));
    RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(inverse_kernel_), optin));
    if (options_.gemm_3xtf32) return absl::OkStatus();  // the channel mix needs no cuBLAS
    // Pedantic: fp32 FMA on the CUDA cores only; TF32 would miss the accuracy bar by 60-470x.
    // (cublasCgemm3mStridedBatched was tried here as a 25%-fewer-products mix: on the H200 it ran
    // the same kernel as CGEMM for these sizes, in pedantic and default mode alike, with identical
    // times and results (PERF.md, rounds 4-5), so it was removed.)
    return blas_.Init(CUBLAS_PEDANTIC_MATH);
  }

  size_t workspace_bytes() const override { return config_.workspace.total_bytes; }
  // The channel mix on cuBLAS is a library call, not a recorded launch.
  bool records_launches() const override { return options_.gemm_3xtf32; }

  absl::Status Run(const RunArgs& a) const override {
    const unsigned long long epoch = NextEpoch();
    for (int stage = 0; stage < kNumStages; ++stage) {
      RETURN_IF_ERROR(Launch(static_cast<Stage>(stage), a, /*in_run=*/true, epoch));
    }
    return absl::OkStatus();
  }

  // One step of Run; Run is the four in order. in_run: launched right after the stage before it
  // (the filter kernel first), so the input and inverse kernels may overlap their predecessor
  // (pdl.cuh); a stage on its own is launched plainly.
  absl::Status RunStage(Stage stage, const RunArgs& a, bool in_run) const override {
    return Launch(stage, a, in_run, stage_epoch_);
  }

 private:
  // One stage with the call's epoch (the flag's value for this call: see SparseLists).
  absl::Status Launch(Stage stage, const RunArgs& a, bool in_run,
                      unsigned long long epoch) const {
    const WorkspaceLayout& l = config_.workspace;
    if (a.workspace == nullptr || a.workspace_bytes < l.total_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fft_fused: workspace of ", a.workspace_bytes, " bytes given, ", l.total_bytes,
          " needed"));
    }
    const uintptr_t p = reinterpret_cast<uintptr_t>(a.workspace);
    char* base = reinterpret_cast<char*>((p + fft_tiled::kAlignment - 1) /
                                         fft_tiled::kAlignment * fft_tiled::kAlignment);
    auto at = [&](Buffer b) { return static_cast<void*>(base + l.offset[b]); };
    auto* filter_spectrum = static_cast<Cf*>(at(kFilterSpectrum));
    auto* input_spectrum = static_cast<Cf*>(at(kInputSpectrum));
    auto* output_spectrum = static_cast<Cf*>(at(kOutputSpectrum));
    const cudaStream_t stream = a.stream;
    // The epoch goes to the filter kernel only; the others read it from the workspace, so their
    // arguments are the same on every call (SparseLists).
    const SparseLists lists = MakeSparseLists(at(kSparse), shape_, config_.geometry, 0);
    SparseLists filter_lists = lists;
    filter_lists.epoch = epoch;

    switch (stage) {
      case kFilterStage:
        return CudaStatus(LaunchPdl(/*pdl=*/false, filter_kernel_, FilterCtas(fwd_), kThreads,
                                    config_.smem.bytes_fwd, stream, fwd_, a.w, filter_spectrum,
                                    filter_lists),
                          "fft_fused filter kernel");
      case kInputStage:
        return CudaStatus(LaunchPdl(in_run, input_kernel_, InputCtas(fwd_), kThreads,
                                    config_.smem.bytes_fwd, stream, fwd_, a.x, input_spectrum,
                                    lists),
                          "fft_fused input kernel");
      case kMixStage: {
        // Y_f = X_f * W_f^H for every frequency f, exactly as fft_tiled.
        const fft_tiled::GemmLayout g = fft_tiled::ChannelMixLayout(shape_, config_.geometry);
        if (options_.gemm_3xtf32) {
          return CgemmConjBatched3xTf32(g, input_spectrum, filter_spectrum, output_spectrum,
                                        stream, options_.mix_kernel);
        }
        RETURN_IF_ERROR(blas_.Bind(stream, at(kBlasWork), l.bytes[kBlasWork]));
        const cuComplex one = make_cuComplex(1.0f, 0.0f), zero = make_cuComplex(0.0f, 0.0f);
        return blas_.Check(
            cublasCgemmStridedBatched(
                blas_.get(), CUBLAS_OP_N, CUBLAS_OP_C, g.m, g.n, g.k, &one,
                reinterpret_cast<const cuComplex*>(input_spectrum), g.lda, g.stride_a,
                reinterpret_cast<const cuComplex*>(filter_spectrum), g.ldb, g.stride_b, &zero,
                reinterpret_cast<cuComplex*>(output_spectrum), g.ldc, g.stride_c, g.batch),
            "cublasCgemmStridedBatched");
      }
      case kInverseStage:
        return CudaStatus(LaunchPdl(in_run, inverse_kernel_, InverseCtas(inv_), kThreads,
                                    config_.smem.bytes_inv, stream, inv_,
                                    static_cast<const Cf*>(output_spectrum), a.y,
                                    SparseInputs{lists, a.x, a.w}),
                          "fft_fused inverse kernel");
      case kNumStages: break;
    }
    return absl::InternalError("fft_fused: bad stage");
  }

  Shape shape_;
  Options options_;
  Config config_;
  KernelParams fwd_, inv_;
  ForwardKernelFn filter_kernel_, input_kernel_;
  InverseKernelFn inverse_kernel_;
  CublasHandle blas_{"fft_fused"};
  // Stages run one at a time (RunStage, for timing them) share one epoch: a stale flag there
  // only costs the inverse a scan of the counts.
  const unsigned long long stage_epoch_ = NextEpoch();

  // Unique across runners and calls in this process (a process-wide counter), and started from
  // the clock so that what another process left in a workspace does not match either.
  static unsigned long long NextEpoch() {
    static std::atomic<unsigned long long> counter{static_cast<unsigned long long>(
        std::chrono::system_clock::now().time_since_epoch().count())};
    return counter.fetch_add(1, std::memory_order_relaxed) + 1;
  }
};

absl::StatusOr<std::unique_ptr<FftFusedRunner>> BuildRunner(const Shape& shape,
                                                             const Options& options,
                                                             const Config& config,
                                                             const DeviceInfo& device) {
  auto runner = std::make_unique<FftFusedRunner>(shape, options, config);
  RETURN_IF_ERROR(runner->Init(device));
  return runner;
}

absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& shape, const Options& options,
                                              const Config& config, const DeviceInfo& device) {
  ASSIGN_OR_RETURN(std::unique_ptr<FftFusedRunner> runner,
                   BuildRunner(shape, options, config, device));
  return std::unique_ptr<Runner>(std::move(runner));
}

// The FFT algorithm with zero padding declared: the tiles are laid over the padded image and
// their loads read x at (row - pad_top, col - pad_left), zero outside (ChooseConfig refuses
// stride, dilation and groups, as Propose does from this geometry).
class FftFusedAlgorithm final : public FftAlgorithm<Options, Config> {
 public:
  using FftAlgorithm<Options, Config>::FftAlgorithm;
  ::conv2d::Geometry geometry() const override {
    ::conv2d::Geometry g;
    g.padding = true;
    return g;
  }
};

// "fft_fused" and "fft_fused_3xtf32": one algorithm, two sets of options.
std::unique_ptr<Algorithm> Make(const char* name, const Options& options, double calibration) {
  return std::make_unique<FftFusedAlgorithm>(name, options, calibration, &ChooseConfig, &Build,
                                             /*cleans=*/true);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StagedRunner>> CreateStagedRunner(const Shape& shape,
                                                                 const Options& options) {
  ASSIGN_OR_RETURN(Config config, ChooseConfig(shape, options));
  ASSIGN_OR_RETURN(DeviceInfo device, DeviceInfo::Current());
  ASSIGN_OR_RETURN(std::unique_ptr<FftFusedRunner> runner,
                   BuildRunner(shape, options, config, device));
  return std::unique_ptr<StagedRunner>(std::move(runner));
}

absl::StatusOr<std::unique_ptr<Runner>> CreateRunner(const Shape& shape, const Options& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<StagedRunner> runner, CreateStagedRunner(shape, options));
  return std::unique_ptr<Runner>(std::move(runner));
}

}  // namespace fft_fused

// Calibrations fitted by tools/fit_auto.py (docs/data/round45_fit_*.json).
std::unique_ptr<Algorithm> MakeFftFused() {
  return fft_fused::Make("fft_fused", fft_fused::Options{}, 1.277);
}

std::unique_ptr<Algorithm> MakeFftFused3xTf32() {
  fft_fused::Options tensor_cores;
  tensor_cores.gemm_3xtf32 = true;
  return fft_fused::Make("fft_fused_3xtf32", tensor_cores, 1.239);
}

}  // namespace conv2d
