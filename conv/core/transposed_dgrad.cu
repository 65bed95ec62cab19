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

// Up to kPhasesPerLaunch phases' filters in one launch, one thread per element (the writes
// coalesced), the phases' filters one after another as DgradAsForwards laid them out: a launch
// per phase cost ~4 us each of mostly launch latency (round 106's ncu: 15 us for the four of a
// 3x3/2 dgrad) for a few hundred KB of filter.
constexpr int kPhasesPerLaunch = 16;
struct PhaseFilters {
  int64_t cg = 0, og = 0, kh = 0, kw = 0, sh = 1, sw = 1;
  int count = 0;
  int64_t base = 0;   // where the launch's first phase's filter starts (DgradPhase::filter_offset)
  int64_t total = 0;  // elements of the launch's phases
  struct Phase {
    int64_t begin = 0;  // its first element, counted from base
    int32_t th = 0, tw = 0, p0h = 0, p0w = 0;
  } phase[kPhasesPerLaunch];
};
__global__ void TransposeFilterKernel(const float* __restrict__ w, float* __restrict__ wt,
                                      PhaseFilters f) {
  const int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (e >= f.total) return;
  int i = 0;
  while (i + 1 < f.count && f.phase[i + 1].begin <= e) ++i;
  const PhaseFilters::Phase& ph = f.phase[i];
  wt[e] = w[TransposedFilterSource(e - ph.begin, f.cg, f.og, f.kh, f.kw, ph.th, ph.tw, ph.p0h,
                                   ph.p0w, f.sh, f.sw)];
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
// [the forwards'] (the phases run one after another on the stream, so the forwards' workspace is
// reused). The fold: [slack][its filter][zero terms][the columns][its forward's].
class TransposedDgradRunner : public Runner {
 public:
  TransposedDgradRunner(const Shape& dgrad, std::vector<DgradPhase> phases,
                        std::vector<std::unique_ptr<Runner>> forwards)
      : s_(dgrad), phases_(std::move(phases)), forwards_(std::move(forwards)) {
    for (size_t i = 0; i < phases_.size(); ++i) {
      if (phases_[i].empty()) continue;
      filters_ += static_cast<size_t>(phases_[i].forward.filter_elements());
      inner_ = std::max(inner_, forwards_[i]->workspace_bytes());
      records_ = records_ && forwards_[i]->records_launches();
      if (!phases_[i].fold) AddFilterLaunch(phases_[i]);
    }
    fold_ = phases_.size() == 1 && phases_[0].fold;
    if (fold_) {
      fold_map_ = MakeFoldMap(s_);
      out_ = static_cast<size_t>(phases_[0].forward.output_elements());
    } else if (s_.strided()) {  // otherwise the one forward writes dx
      map_ = MakeScatterMap(s_, phases_);
      out_ = static_cast<size_t>(map_.outputs);
    }
  }
  size_t workspace_bytes() const override {
    return kAlign + Aligned(filters_ * 4) + Aligned(s_.in_channels * 4) + Aligned(out_ * 4) +
           inner_;
  }
  bool records_launches() const override { return records_; }

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
    for (size_t i = 0; i < phases_.size(); ++i) {
      if (phases_[i].empty()) continue;
      RETURN_IF_ERROR(Forward(i, a, filters + phases_[i].filter_offset,
                              phased ? out + map_.offset[i] : a.dx, inner));
    }
    if (!phased) return absl::OkStatus();
    return DxPassLaunch(ScatterKernel, out, zero, map_, a, "transposed dgrad: scatter");
  }

 private:
  // Phase ph's filter into the current filter launch, or a new one where that is full.
  void AddFilterLaunch(const DgradPhase& ph) {
    if (filter_launches_.empty() || filter_launches_.back().count == kPhasesPerLaunch) {
      PhaseFilters f;
      f.cg = s_.in_per_group(), f.og = s_.out_per_group();
      f.kh = s_.kernel_h, f.kw = s_.kernel_w, f.sh = s_.stride_h, f.sw = s_.stride_w;
      f.base = ph.filter_offset;
      filter_launches_.push_back(f);
    }
    PhaseFilters& f = filter_launches_.back();
    PhaseFilters::Phase& p = f.phase[f.count++];
    p.begin = ph.filter_offset - f.base;
    p.th = static_cast<int32_t>(ph.forward.kernel_h);
    p.tw = static_cast<int32_t>(ph.forward.kernel_w);
    p.p0h = static_cast<int32_t>(ph.p0h);
    p.p0w = static_cast<int32_t>(ph.p0w);
    f.total = p.begin + ph.forward.filter_elements();
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
    RETURN_IF_ERROR(Forward(0, a, filter, cols, inner));
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

  // Forward i on dy with `filter`, writing `y`.
  absl::Status Forward(size_t i, const RunArgs& a, const float* filter, float* y,
                       void* inner) const {
    RunArgs f;
    f.x = a.dy;
    f.w = filter;
    f.y = y;
    f.workspace = inner;
    f.workspace_bytes = inner_;
    f.stream = a.stream;
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
  bool records_ = true;
};

}  // namespace

absl::Status TransposeChannels(const float* in, float* out, int64_t rows, int64_t cols,
                               cudaStream_t stream) {
  // TransposedFilterSource at 1x1, groups 1: w' [Cin = cols][Cout = rows] from w [rows][cols].
  PhaseFilters f;
  f.cg = cols, f.og = rows, f.count = 1, f.total = rows * cols;
  f.phase[0].th = f.phase[0].tw = 1;
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
