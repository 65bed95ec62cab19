#include "conv/core/transposed_dgrad.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/dx_pass.cuh"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace {

// The phases' filters (PhaseFilters), one thread per element, the writes coalesced.
__global__ void TransposeFilterKernel(const float* __restrict__ w, float* __restrict__ wt,
                                      PhaseFilters f) {
  const int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (e < f.total) wt[e] = w[PhaseFilterSource(f, e)];
}

// zero[c] = 0 where every filter tap at input channel c is finite, else NaN: the zeros between a
// stride's outputs times those taps (conv/shape.h), which no phase's forward multiplies. One CTA
// per channel, its threads over the channel's Cout/groups x taps values with independent loads:
// a thread per channel walking them in turn (round 96) was latency bound, 1.5 ms on ResNet-50's
// stem (3 channels x 3,136 taps) and ~0.5 ms on its 1x1 stride-2 layers.
constexpr int kZeroThreads = 256;
__global__ void __launch_bounds__(kZeroThreads)
    ZeroTermsKernel(const float* __restrict__ w, float* __restrict__ zero, int64_t cg,
                    int64_t og, int64_t taps) {
  const int64_t c = blockIdx.x;
  const float* f = w + (c / cg * og * cg + c % cg) * taps;  // tap 0 of output channel 0
  bool finite = true;
  for (int64_t k = threadIdx.x; k < og * taps; k += kZeroThreads) {
    const int64_t o = k / taps, t = k - o * taps;
    finite &= static_cast<bool>(isfinite(f[o * cg * taps + t]));
  }
  finite = __syncthreads_and(finite);
  if (threadIdx.x == 0) zero[c] = finite ? 0.0f : __int_as_float(0x7fc00000);
}

// The phases' outputs scattered (ScatterMap); 0 where no tap reaches the pixel's phase.
__global__ void ScatterKernel(const float* __restrict__ out, const float* __restrict__ zero,
                              float* __restrict__ dx, const ScatterMap m, int64_t channels,
                              int chunks) {
  DxPass(
      m, dx, chunks, [&](const DxPassChunk& ch) { return zero[ch.bc % channels]; },
      [&](int64_t bc, int y, int x) {
        const int64_t src = ScatterSource(m, bc, y, x);
        return src >= 0 ? out[src] : 0.0f;
      });
}

// The fold's gather from the columns (FoldPixel).
__global__ void FoldKernel(const float* __restrict__ cols, const float* __restrict__ zero,
                           float* __restrict__ dx, const FoldMap m, int64_t channels,
                           int chunks) {
  DxPass(
      m, dx, chunks, [&](const DxPassChunk& ch) { return zero[ch.bc % channels]; },
      [&](int64_t bc, int y, int x) { return FoldPixel<float>(m, cols, bc, y, x); });
}

// The fold's filter (FoldFilterSource), one thread per element.
__global__ void FoldFilterKernel(const float* __restrict__ w, float* __restrict__ wf, int64_t cg,
                                 int64_t og, int64_t taps, int64_t total) {
  const int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (e < total) wf[e] = w[FoldFilterSource(e, cg, og, taps)];
}

constexpr uintptr_t kAlign = 256;
size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
constexpr int kThreads = 256;
dim3 Blocks(int64_t n) { return dim3(static_cast<unsigned>((n + kThreads - 1) / kThreads)); }

// Workspace: [slack][filters of every phase][zero terms][every phase's output (ScatterMap)]
// [the forwards']: each phase's own, one after another, where the phases run side by side
// (Concurrent), else the largest, which they reuse in turn. The fold: [slack][its filter][zero
// terms][the columns][its forward's].
class TransposedDgradRunner : public Runner {
 public:
  TransposedDgradRunner(const Shape& dgrad, std::vector<DgradPhase> phases,
                        std::vector<std::unique_ptr<Runner>> forwards)
      : s_(dgrad), phases_(std::move(phases)), forwards_(std::move(forwards)) {
    fold_ = phases_.size() == 1 && phases_[0].fold;
    for (size_t i = 0; i < phases_.size(); ++i) {
      if (phases_[i].empty()) continue;
      filters_ += static_cast<size_t>(phases_[i].forward.filter_elements());
      inner_ = std::max(inner_, forwards_[i]->workspace_bytes());
      records_ = records_ && forwards_[i]->records_launches();
      launch_order_.push_back(i);
    }
    if (!fold_) filter_launches_ = PhaseFilterLaunches(s_, phases_);
    std::stable_sort(launch_order_.begin(), launch_order_.end(), [&](size_t i, size_t j) {
      return phases_[i].forward.filter_elements() > phases_[j].forward.filter_elements();
    });
    for (size_t i : launch_order_) {  // in launch order: the k-th launched has inner_at_[k]
      inner_at_.push_back(inners_);
      inners_ += Aligned(forwards_[i]->workspace_bytes());
    }
    if (fold_) {
      fold_map_ = MakeFoldMap(s_);
      out_ = static_cast<size_t>(phases_[0].forward.output_elements());
    } else if (s_.strided()) {  // otherwise the one forward writes dx
      map_ = MakeScatterMap(s_, phases_);
      out_ = static_cast<size_t>(map_.outputs);
    }
  }
  ~TransposedDgradRunner() override {
    for (cudaStream_t st : side_) cudaStreamDestroy(st);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  size_t workspace_bytes() const override {
    return kAlign + Aligned(filters_ * 4) + Aligned(s_.in_channels * 4) + Aligned(out_ * 4) +
           (Concurrent() ? inners_ : inner_);
  }
  // A graph recording holds one stream's launches; the concurrent phases use several.
  bool records_launches() const override { return records_ && !Concurrent(); }

  absl::Status Run(const RunArgs& a) const override {
    char* p = reinterpret_cast<char*>(
        (reinterpret_cast<uintptr_t>(a.workspace) + kAlign - 1) / kAlign * kAlign);
    float* filters = reinterpret_cast<float*>(p);
    float* zero = reinterpret_cast<float*>(p + Aligned(filters_ * 4));
    float* out =
        reinterpret_cast<float*>(reinterpret_cast<char*>(zero) + Aligned(s_.in_channels * 4));
    void* inner = reinterpret_cast<char*>(out) + Aligned(out_ * 4);
    if (fold_) return RunFold(a, filters, zero, out, inner);
    const bool phased = s_.strided();
    for (const PhaseFilters& pf : filter_launches_) {
      RETURN_IF_ERROR(CudaStatus(
          LaunchPdl(false, TransposeFilterKernel, Blocks(pf.total), kThreads, 0, a.stream, a.w,
                    filters + pf.base, pf),
          "transposed dgrad: filter transform"));
    }
    if (phased) RETURN_IF_ERROR(ZeroTerms(a, zero));
    if (Concurrent() && SideStreams(a.stream)) {
      RETURN_IF_ERROR(RunSideBySide(a, filters, out, static_cast<char*>(inner)));
    } else {
      for (size_t i = 0; i < phases_.size(); ++i) {
        if (phases_[i].empty()) continue;
        RETURN_IF_ERROR(Forward(i, a, filters + phases_[i].filter_offset,
                                phased ? out + map_.offset[i] : a.dx, inner, a.stream));
      }
    }
    if (!phased) return absl::OkStatus();
    return DxPassLaunch(ScatterKernel, out, zero, map_, a, "transposed dgrad: scatter");
  }

 private:
  // The strided phases side by side: each phase's forward is a short-K GEMM (4-16 k-tiles at
  // ResNet's 3x3/2) whose fill and drain, launched alone, leave the SMs idle (round 106's ncu:
  // 168 us for the four of a 3x3/2 dgrad against the forward's 82 for the same FLOPs); on
  // streams of their own each one's CTAs take the SMs another's leave. The phases write disjoint
  // outputs and each its own workspace, and each computes what it computes alone, so the bits do
  // not depend on the order the GPU runs them in.
  bool Concurrent() const { return s_.strided() && !fold_ && launch_order_.size() > 1; }

  // The side streams and the fork and join events, made on first use on the caller's device;
  // false where they cannot be (another device than the first call's; the caller's stream being
  // captured before they exist: making them then is not capture-safe), the phases then one after
  // another on the caller's stream. Plan::Run serializes calls, so the events are not shared.
  bool SideStreams(cudaStream_t stream) const {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (!side_.empty()) return device == side_device_;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
        capture != cudaStreamCaptureStatusNone) {
      cudaGetLastError();
      return false;
    }
    const size_t sides = launch_order_.size() - 1;
    for (size_t i = 0; i < sides; ++i) {
      cudaStream_t st = nullptr;
      if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) break;
      side_.push_back(st);
    }
    for (size_t i = 0; i < sides + 1 && side_.size() == sides; ++i) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) break;
      events_.push_back(e);
    }
    if (side_.size() != sides || events_.size() != sides + 1) {
      for (cudaStream_t st : side_) cudaStreamDestroy(st);
      for (cudaEvent_t e : events_) cudaEventDestroy(e);
      side_.clear();
      events_.clear();
      cudaGetLastError();
      return false;
    }
    side_device_ = device;
    return true;
  }

  // Phase forwards on the caller's stream (the first) and the side streams (the rest), each
  // after the filters and zero terms (event 0), the caller's stream joining every side stream
  // before the scatter (events 1..). The phases with the most taps are enqueued first, so that
  // the longest GEMMs take the SMs first and the short ones fill in behind them.
  absl::Status RunSideBySide(const RunArgs& a, float* filters, float* out, char* inner) const {
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events_[0], a.stream), "transposed dgrad: fork"));
    for (size_t k = 0; k < launch_order_.size(); ++k) {
      const size_t i = launch_order_[k];
      cudaStream_t st = k == 0 ? a.stream : side_[k - 1];
      if (k > 0) {
        RETURN_IF_ERROR(
            CudaStatus(cudaStreamWaitEvent(st, events_[0], 0), "transposed dgrad: fork"));
      }
      RETURN_IF_ERROR(Forward(i, a, filters + phases_[i].filter_offset, out + map_.offset[i],
                              inner + inner_at_[k], st));
      if (k > 0) {
        RETURN_IF_ERROR(
            CudaStatus(cudaEventRecord(events_[k], st), "transposed dgrad: join"));
        RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(a.stream, events_[k], 0),
                                   "transposed dgrad: join"));
      }
    }
    return absl::OkStatus();
  }

  // The fold (DgradAsFold): its filter and the zero terms, the 1x1 forward into the columns,
  // the gather into dx.
  absl::Status RunFold(const RunArgs& a, float* filter, float* zero, float* cols,
                       void* inner) const {
    const int64_t taps = s_.kernel_h * s_.kernel_w, total = s_.filter_elements();
    RETURN_IF_ERROR(CudaStatus(
        LaunchPdl(false, FoldFilterKernel, Blocks(total), kThreads, 0, a.stream, a.w, filter,
                  s_.in_per_group(), s_.out_per_group(), taps, total),
        "transposed dgrad: the fold's filter"));
    RETURN_IF_ERROR(ZeroTerms(a, zero));
    RETURN_IF_ERROR(Forward(0, a, filter, cols, inner, a.stream));
    return DxPassLaunch(FoldKernel, cols, zero, fold_map_, a,
                        "transposed dgrad: the fold's gather");
  }

  // Every input channel's zero term (ZeroTermsKernel).
  absl::Status ZeroTerms(const RunArgs& a, float* zero) const {
    return CudaStatus(
        LaunchPdl(false, ZeroTermsKernel, dim3(static_cast<unsigned>(s_.in_channels)),
                  kZeroThreads, 0, a.stream, a.w, zero, s_.in_per_group(), s_.out_per_group(),
                  s_.kernel_h * s_.kernel_w),
        "transposed dgrad: zero terms");
  }

  // Forward i on dy with `filter`, writing `y`, on `stream`.
  absl::Status Forward(size_t i, const RunArgs& a, const float* filter, float* y, void* inner,
                       cudaStream_t stream) const {
    RunArgs f;
    f.x = a.dy;
    f.w = filter;
    f.y = y;
    f.workspace = inner;
    f.workspace_bytes = forwards_[i]->workspace_bytes();
    f.stream = stream;
    return forwards_[i]->Run(f);
  }

  // One DxPass kernel over dx (the scatter or the fold's gather) from `src`.
  template <typename Map>
  absl::Status DxPassLaunch(void (*kernel)(const float*, const float*, float*, Map, int64_t, int),
                            const float* src, const float* zero, const Map& m, const RunArgs& a,
                            const char* what) const {
    const DxPassDims d = DxPassDimsFor(s_.batch * s_.in_channels, s_.height * s_.width);
    return CudaStatus(LaunchPdl(false, kernel, dim3(d.blocks), d.threads, 0, a.stream, src, zero,
                                a.dx, m, s_.in_channels, d.chunks),
                      what);
  }

  Shape s_;
  std::vector<DgradPhase> phases_;
  std::vector<std::unique_ptr<Runner>> forwards_;
  std::vector<PhaseFilters> filter_launches_;  // the non-empty phases' filters, in order
  ScatterMap map_;
  FoldMap fold_map_;
  bool fold_ = false;
  size_t filters_ = 0, out_ = 0, inner_ = 0;
  std::vector<size_t> launch_order_;  // the non-empty phases, the most taps first
  std::vector<size_t> inner_at_;      // their workspaces, side by side (inners_), in that order
  size_t inners_ = 0;
  bool records_ = true;
  mutable std::vector<cudaStream_t> side_;  // SideStreams
  mutable std::vector<cudaEvent_t> events_;
  mutable int side_device_ = -1;
};

}  // namespace

absl::Status TransposeChannels(const float* in, float* out, int64_t rows, int64_t cols,
                               cudaStream_t stream) {
  const PhaseFilters f = ChannelTransposeFilters(rows, cols);
  return CudaStatus(
      LaunchPdl(false, TransposeFilterKernel, Blocks(f.total), kThreads, 0, stream, in, out, f),
      "channel transpose");
}

namespace {

std::unique_ptr<Runner> MakeTransposedDgradRunner(const Shape& dgrad,
                                                  const std::vector<DgradPhase>& phases,
                                                  std::vector<std::unique_ptr<Runner>> forwards) {
  return std::make_unique<TransposedDgradRunner>(dgrad, phases, std::move(forwards));
}

// Linked into every binary that links the plan (alwayslink): Algorithm::Initialize finds it.
const bool registered = (transposed_dgrad_factory = &MakeTransposedDgradRunner, true);

}  // namespace
}  // namespace conv2d
