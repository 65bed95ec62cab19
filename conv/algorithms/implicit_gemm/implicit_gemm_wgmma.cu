// "implicit_gemm_wgmma": implicit-GEMM convolution with wgmma (sm_90a), 3xTF32. The tiling, the
// operand layouts and why they are what they are: implicit_gemm_wgmma_internal.h.
//
// Accuracy. The arithmetic is implicit_gemm_3xtf32's, whose error argument (top of
// implicit_gemm_3xtf32.cu, model replayed in its CPU test) carries over unchanged:
//  - The split of conv/arch/split_3xtf32.h, for the input (per element in the main loop) and the
//    filter (once per call, SplitFilterKernel) alike: v = hi + lo, hi = v rounded to TF32,
//    lo = v - hi unrounded; a*b ~ a_lo*b_hi + a_hi*b_lo + a_hi*b_hi, each product off by
//    ~2^-21|ab| at most.
//  - Per k8 step the three products go into one fp32 accumulator in that order (small terms
//    first); the accumulator holds kFoldTiles*kBK = 128 terms, then is added with IEEE fp32
//    round-to-nearest into a second register set, and the next chunk's first wgmma overwrites
//    it (scale-d = 0). This bounds the partial sums that the
//    tensor core's (possibly truncating) accumulation sees, exactly as the verified model does.
//  - Reductions beyond kMaxReduction (2^18 terms) are declined, as there.
//
// The kernels and their pipeline: implicit_gemm_wgmma_kernels.cuh.

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "conv/arch/cp_async.cuh"
#include "conv/arch/mbarrier.cuh"
#include "conv/arch/split_3xtf32.h"
#include "conv/arch/wgmma.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/transposed_dgrad.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_internal.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_kernels.cuh"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_wgrad.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/arch/int_math.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace implicit_gemm_wgmma_internal {

// The largest reduction length accepted: the same bound as implicit_gemm_3xtf32 (twice the
// longest reduction its accuracy was measured on).
constexpr int64_t kMaxReduction = int64_t{1} << 18;
// The split filter must be indexable with 32-bit float offsets inside one N tile's run and stay
// a reasonable workspace: 2 GiB at most.
constexpr int64_t kMaxSplitFilterBytes = int64_t{1} << 31;

absl::Status CheckIndexing(const Shape& s) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  absl::Status st = CheckFitsInt32(s, "implicit_gemm_wgmma");
  if (!st.ok()) return st;
  const int64_t m = s.batch * s.out_h() * s.out_w();
  const int64_t k = s.in_channels * s.kernel_h * s.kernel_w;
  // Indices formed past the ends: pixel columns up to M + kBM, channels up to Cout + 128, k up
  // to K + kBK, and the gathers' x offsets (pixel base + k offset, added before the k < K mask
  // selects them) up to the input's size plus (kBK + 1)*H*W.
  // With the geometry the window origins reach pad_top rows and pad_left columns before the
  // image and the taps span_h rows below them.
  const int64_t padded_plane = (s.height + s.pad_top + s.pad_bottom + s.span_h()) *
                               (s.width + s.pad_left + s.pad_right + s.span_w());
  if (m + kBM > kMax || s.out_channels + 128 > kMax || k + kBK > kMax ||
      s.input_elements() + (kBK + 1) * padded_plane > kMax ||
      NumTiles(s, ChooseBN(s)) + kMaxSlots > kMax) {  // tile indices + grid (UnitWalk)
    return absl::OutOfRangeError(absl::StrCat(
        "implicit_gemm_wgmma indexes with 32-bit integers; shape ", s.ToString(),
        " leaves no room for its tile overhang"));
  }
  return absl::OkStatus();
}

// N tiles: each group's output channels tiled on their own.
int64_t NumNTiles(const Shape& s, int bn) {
  return s.groups * ((s.out_per_group() + bn - 1) / bn);
}

int64_t NumTiles(const Shape& s, int bn) {
  const int64_t m = s.batch * s.out_h() * s.out_w();
  return ((m + kBM - 1) / kBM) * NumNTiles(s, bn);
}

int64_t SplitFilterBytes(const Shape& s, int bn) {
  const int64_t k_tiles = (s.reduction() + kBK - 1) / kBK;
  return NumNTiles(s, bn) * k_tiles * 2 * bn * kBK * 4;
}

Params MakeParams(const Shape& s, int bn, int slots) {
  Params p;
  implicit_gemm_view::SetGemmView(s, kBK, bn, &p);
  p.groups = static_cast<int>(s.groups);
  p.geometry = p.geometry || s.grouped();  // the grouped kernels are built with the geometry gather
  p.cout_g = static_cast<int>(s.out_per_group());
  p.n_tiles_g = static_cast<int>((s.out_per_group() + bn - 1) / bn);
  p.cin_g_hw = static_cast<int>(s.in_per_group()) * p.hw;
  p.m_tiles = (p.m + kBM - 1) / kBM;
  p.tiles = p.m_tiles * p.n_tiles;
  const Schedule sched = ChooseSchedule(p.tiles, p.k_tiles, slots, TailMargin(bn));
  p.grid = sched.grid;
  p.dp_tiles = sched.dp_tiles;
  p.tail_ctas = sched.tail_ctas;
  p.tail_k = (p.tiles - p.dp_tiles) * p.k_tiles;
  return p;
}

// A slice's partial dw, written and read back at 3 TB/s, in k-tile times of one CTA at the
// model's rate (ChooseWgrad's).
double WgradSliceKTiles(const Shape& s, int bn) {
  const double ktile_seconds =
      3.0 * 2.0 * kBM * bn * kBK / (300e12 / kSplitSms / CtasPerSm(bn));
  return 8.0 * static_cast<double>(s.filter_elements()) / 3e12 / ktile_seconds;
}

absl::Status CheckWgradIndexing(const Shape& s) {
  RETURN_IF_ERROR(CheckIndexing(s));
  // Beyond the forward's: taps up to M + kBM (M = (Cin/groups)*Kh*Kw), dy offsets below its size.
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (s.reduction() + kBM > kMax || s.output_elements() + s.out_channels > kMax) {
    return absl::OutOfRangeError(absl::StrCat(
        "implicit_gemm_wgmma wgrad indexes with 32-bit integers; shape ", s.ToString(),
        " leaves no room for its tile overhang"));
  }
  return absl::OkStatus();
}

int64_t WgradTiles(const Shape& s, int bn) {
  return (s.reduction() + kBM - 1) / kBM * NumNTiles(s, bn);
}

absl::StatusOr<wgrad_split::SplitK> WgradSplitK(const Shape& s, int bn) {
  absl::StatusOr<wgrad_split::SliceRange> range =
      wgrad_split::SliceLimits(s, kBK, "implicit_gemm_wgmma");
  if (!range.ok()) return range.status();
  const int64_t tiles = WgradTiles(s, bn);
  const int64_t slots = int64_t{kSplitSms} * CtasPerSm(bn);
  wgrad_split::SplitK best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int64_t slices = range->fewest; slices <= range->most; ++slices) {
    const wgrad_split::SplitK split = wgrad_split::SplitOf(range->k_tiles, slices);
    if (split.slices != slices) continue;  // the same split as a smaller count's
    const int64_t rounds = (tiles * split.slices + slots - 1) / slots;
    // In k-tile times of one CTA: the longest CTA's units, and each slice's partial dw written
    // and read once more (at 3 TB/s, one k-tile ~1.4 us at BN = 128 on 132 SMs).
    const double cost = static_cast<double>(rounds) * (split.slice_tiles + kUnitOverhead) +
                        (split.slices > 1 ? split.slices : 0) * WgradSliceKTiles(s, bn);
    if (cost < best_cost) {
      best_cost = cost;
      best = split;
    }
  }
  return best;
}

Params MakeWgradParams(const Shape& s, int bn, int slots, const wgrad_split::SplitK& split) {
  Params p;
  implicit_gemm_view::SetGemmView(s, kBK, bn, &p);
  p.geometry = true;
  p.groups = static_cast<int>(s.groups);
  p.cout_g = static_cast<int>(s.out_per_group());
  p.n_tiles_g = static_cast<int>((s.out_per_group() + bn - 1) / bn);
  p.cg = static_cast<int>(s.in_per_group());
  p.cin_g_hw = p.cg * p.hw;
  p.red = static_cast<int>(s.reduction());
  // wgrad's GEMM.
  p.m = p.red;
  p.k = static_cast<int>(s.batch) * p.p;
  p.k_tiles = (p.k + kBK - 1) / kBK;
  p.m_tiles = (p.m + kBM - 1) / kBM;
  p.tiles = p.m_tiles * p.n_tiles;
  p.slices = split.slices;
  p.slice_tiles = split.slice_tiles;
  p.units = p.tiles * p.slices;
  p.grid = p.units < slots ? p.units : slots;
  p.fold_tiles = wgrad_split::ChunkTerms(p.k) / kBK;
  p.cout_p = p.cout * p.p;
  p.slice_stride = p.cout * p.red;
  return p;
}

namespace {

// Workspace: the split filter, at a 256-byte aligned offset of the caller's buffer (which may be
// unaligned).
constexpr size_t kWorkspaceAlign = 256;

// The schedule of a shape on a device with `sms` multiprocessors.
Params ParamsFor(const Shape& s, int bn, int sms) { return MakeParams(s, bn, sms * CtasPerSm(bn)); }

class ImplicitGemmWgmmaRunner : public Runner {
 public:
  ImplicitGemmWgmmaRunner(int bn, const Params& p, int64_t split_bytes, bool split_b)
      : bn_(bn), p_(p), split_bytes_(split_bytes), split_b_(split_b) {}
  size_t workspace_bytes() const override {
    return split_b_ ? 0
                    : static_cast<size_t>(split_bytes_ + TailWorkspaceBytes(p_, bn_)) +
                          kWorkspaceAlign;
  }

  // The bias in the epilogue (StoreQuarter, also after a tail tile's pieces are added): the
  // separate pass over y would be a third launch.
  bool adds_bias() const override { return true; }
  bool records_launches() const override { return true; }

  absl::Status Run(const RunArgs& a) const override {
    Params p = p_;
    p.bias = a.bias;
    switch (bn_) {
      case 128: return RunBn<128>(p, a);
      case 64: return RunBn<64>(p, a);
      case 32: return RunBn<32>(p, a);
    }
    return absl::InternalError(absl::StrCat("implicit_gemm_wgmma: no kernel for BN = ", bn_));
  }

 private:
  // One launch (the in-kernel split), or the split kernel into the workspace and then the GEMM.
  template <int BN>
  absl::Status RunBn(const Params& p, const RunArgs& a) const {
    const bool vec_a = CanVectorizeA(p, reinterpret_cast<uintptr_t>(a.x));
    // Persistent CTAs, at most as many as fit on the GPU at once (UnitWalk).
    const dim3 grid(static_cast<unsigned>(p.grid));
    if (split_b_) return GemmSplitB<BN>(p, vec_a, grid, a);
    const uintptr_t base = reinterpret_cast<uintptr_t>(a.workspace);
    float* ws = reinterpret_cast<float*>((base + kWorkspaceAlign - 1) & ~(kWorkspaceAlign - 1));
    Params q = p;
    if (p.tail_ctas > 0) {
      // After the split filter (a multiple of 1024 bytes): the counters, then the slots.
      unsigned char* tail = reinterpret_cast<unsigned char*>(ws) + split_bytes_;
      q.tail_counters = reinterpret_cast<int*>(tail);
      q.tail_partials = reinterpret_cast<float*>(tail + TailCounterBytes(p));
    }
    const unsigned split_blocks = static_cast<unsigned>(p.n_tiles * p.k_tiles + TailZeroBlocks(p));
    RETURN_IF_ERROR(CudaStatus(
        LaunchPdl(/*pdl=*/false,
                  p.groups > 1 ? &SplitFilterKernel<BN, true> : &SplitFilterKernel<BN, false>,
                  split_blocks, kSplitThreads, 0, a.stream, a.w, ws, q),
        "implicit_gemm_wgmma filter split"));
    return Gemm<BN>(q, vec_a, grid, a, ws);
  }

  // The main kernel, started while the split kernel's last blocks still run (pdl.cuh).
  template <int BN>
  static absl::Status Gemm(const Params& p, bool vec_a, dim3 grid, const RunArgs& a,
                           const float* ws) {
    // The tail's walk only in the kernels that have a tail to walk: its state costs registers
    // (round 45: the 1x1 shape 12% slower with it compiled in).
    // Grouped shapes: the geometry gather, whose window origins any geometry takes (MakeParams).
    auto* kernel =
        p.groups > 1 ? (p.tail_ctas > 0 ? &ImplicitGemmWgmmaKernel<BN, false, true, true, true>
                                        : &ImplicitGemmWgmmaKernel<BN, false, false, true, true>)
        : p.geometry ? (p.tail_ctas > 0 ? &ImplicitGemmWgmmaKernel<BN, false, true, true>
                                        : &ImplicitGemmWgmmaKernel<BN, false, false, true>)
        : p.tail_ctas > 0 ? (vec_a ? &ImplicitGemmWgmmaKernel<BN, true, true, false>
                                   : &ImplicitGemmWgmmaKernel<BN, false, true, false>)
                          : (vec_a ? &ImplicitGemmWgmmaKernel<BN, true, false, false>
                                   : &ImplicitGemmWgmmaKernel<BN, false, false, false>);
    return CudaStatus(LaunchPdl(/*pdl=*/true, kernel, grid, kThreads, Config<BN>::kSmemBytes,
                                a.stream, a.x, ws, a.y, p),
                      "implicit_gemm_wgmma kernel launch");
  }

  // The one launch of the in-kernel split (kSplitB): whole tiles, ungrouped (Choose). Without
  // PDL: nothing of this call runs before it, and it must not overlap the caller's kernels.
  template <int BN>
  static absl::Status GemmSplitB(const Params& p, bool vec_a, dim3 grid, const RunArgs& a) {
    auto* kernel = p.geometry ? &ImplicitGemmWgmmaKernel<BN, false, false, true, false, true>
                   : vec_a    ? &ImplicitGemmWgmmaKernel<BN, true, false, false, false, true>
                              : &ImplicitGemmWgmmaKernel<BN, false, false, false, false, true>;
    return CudaStatus(LaunchPdl(/*pdl=*/false, kernel, grid, kThreads, Config<BN>::kSmemBytes,
                                a.stream, a.x, a.w, a.y, p),
                      "implicit_gemm_wgmma kernel launch (in-kernel split)");
  }

  int bn_;
  Params p_;
  int64_t split_bytes_;
  bool split_b_;
};

// wgrad (implicit_gemm_wgmma_wgrad.h): where x is centred its centres and dy's channel sums
// first, then the GEMM into dw or the slices' partials, then the slices' sum in double. Swapped
// (SwappedWgrad): the same on the swapped shape with x and dy exchanged, into the workspace, and
// dw as its transpose.
class WgmmaWgradRunner : public Runner {
 public:
  WgmmaWgradRunner(const Shape& s, int bn, const Params& p, const wgrad_split::SplitK& split,
                   bool swapped)
      : shape_(s), bn_(bn), p_(p), split_(split), swapped_(swapped) {}
  size_t workspace_bytes() const override {
    return wgrad_split::WorkspaceBytes(shape_, split_) + (swapped_ ? SwappedDwBytes() : 0);
  }

  absl::Status Run(const RunArgs& args) const override {
    RunArgs a = args;
    float* dw_t = nullptr;  // swapped: dw transposed, after the split's workspace
    if (swapped_) {
      std::swap(a.x, a.dy);
      const uintptr_t end = reinterpret_cast<uintptr_t>(a.workspace) +
                            wgrad_split::WorkspaceBytes(shape_, split_);
      dw_t = reinterpret_cast<float*>((end + kWorkspaceAlign - 1) & ~(kWorkspaceAlign - 1));
      a.dw = dw_t;
    }
    const wgrad_split::Buffers b = wgrad_split::Carve(a.workspace, shape_, split_);
    wgrad_split::Sum sum = wgrad_split::SumOf(shape_, split_);
    RETURN_IF_ERROR(wgrad_split::Centre(shape_, a.x, a.dy, b, &sum, a.stream));
    Params p = p_;
    p.centers = sum.centers;
    float* out = b.part != nullptr ? b.part : a.dw;
    switch (bn_) {
      case 128: RETURN_IF_ERROR(Gemm<128>(p, a, out)); break;
      case 64: RETURN_IF_ERROR(Gemm<64>(p, a, out)); break;
      case 32: RETURN_IF_ERROR(Gemm<32>(p, a, out)); break;
      default:
        return absl::InternalError(absl::StrCat("implicit_gemm_wgmma: no kernel for BN = ", bn_));
    }
    if (b.part != nullptr) {
      RETURN_IF_ERROR(
          wgrad_split::SumSlices(sum, b.part, a.dw, shape_.filter_elements(), a.stream));
    }
    if (!swapped_) return absl::OkStatus();
    // The swapped shape's dw is [Cin][Cout]: dw = its transpose.
    return TransposeChannels(dw_t, args.dw, shape_.out_channels, shape_.in_channels, a.stream);
  }

 private:
  template <int BN>
  static absl::Status Gemm(const Params& p, const RunArgs& a, float* out) {
    constexpr int kOn = kWgradOn, kC = kWgradOn | kWgradCentred;
    const bool vec = CanVectorizeDy(p, reinterpret_cast<uintptr_t>(a.dy));
    auto* kernel =
        p.centers != nullptr
            ? (vec ? &ImplicitGemmWgmmaKernel<BN, false, false, true, true, false, kC | kWgradVecB>
                   : &ImplicitGemmWgmmaKernel<BN, false, false, true, true, false, kC>)
            : (vec ? &ImplicitGemmWgmmaKernel<BN, false, false, true, true, false, kOn | kWgradVecB>
                   : &ImplicitGemmWgmmaKernel<BN, false, false, true, true, false, kOn>);
    return CudaStatus(LaunchPdl(/*pdl=*/false, kernel, dim3(static_cast<unsigned>(p.grid)),
                                kThreads, Config<BN>::kSmemBytes, a.stream, a.x, a.dy, out, p),
                      "implicit_gemm_wgmma wgrad kernel launch");
  }

  size_t SwappedDwBytes() const {
    return static_cast<size_t>(shape_.filter_elements()) * 4 + kWorkspaceAlign;
  }

  Shape shape_;  // swapped: the swapped shape
  int bn_;
  Params p_;
  wgrad_split::SplitK split_;
  bool swapped_;
};

// The im2col form's two passes (implicit_gemm_wgmma_wgrad.h): col[k][m] from x, a block row k
// of col's M columns per blockIdx.y; dyt[o][k] from dy, consecutive threads on consecutive k.
constexpr int kIm2colThreads = 256;
__global__ void __launch_bounds__(kIm2colThreads)
    Im2colKernel(const float* __restrict__ x, float* __restrict__ col, const Im2colMap g) {
  const int k = static_cast<int>(blockIdx.y);
  const int m = static_cast<int>(blockIdx.x) * kIm2colThreads + static_cast<int>(threadIdx.x);
  if (m >= g.m) return;
  const int src = Im2colSource(g, k, m);
  col[static_cast<int64_t>(k) * g.m + m] = src >= 0 ? __ldg(x + src) : 0.0f;
}
__global__ void __launch_bounds__(kIm2colThreads)
    DyTransposeKernel(const float* __restrict__ dy, float* __restrict__ dyt, const Im2colMap g) {
  const int o = static_cast<int>(blockIdx.y);
  const int k = static_cast<int>(blockIdx.x) * kIm2colThreads + static_cast<int>(threadIdx.x);
  if (k >= g.k) return;
  dyt[static_cast<int64_t>(o) * g.k + k] = __ldg(dy + Im2colDySource(g, o, k));
}

// wgrad by the im2col form: col and dyt into the workspace, then the forward of
// Im2colForward(shape) on them (its own runner, its workspace after theirs) writing dw.
class WgmmaWgradIm2colRunner : public Runner {
 public:
  WgmmaWgradIm2colRunner(const Shape& s, std::unique_ptr<Runner> forward)
      : map_(MakeIm2colMap(s)),
        col_bytes_(RoundUp(int64_t{map_.k} * map_.m * 4, kWorkspaceAlign)),
        dyt_bytes_(RoundUp(int64_t{map_.cout} * map_.k * 4, kWorkspaceAlign)),
        forward_(std::move(forward)) {}
  size_t workspace_bytes() const override {
    return kWorkspaceAlign + col_bytes_ + dyt_bytes_ + forward_->workspace_bytes();
  }
  bool records_launches() const override { return forward_->records_launches(); }

  absl::Status Run(const RunArgs& a) const override {
    char* base = reinterpret_cast<char*>(
        RoundUp(static_cast<int64_t>(reinterpret_cast<uintptr_t>(a.workspace)), kWorkspaceAlign));
    float* col = reinterpret_cast<float*>(base);
    float* dyt = reinterpret_cast<float*>(base + col_bytes_);
    RETURN_IF_ERROR(Pass(&Im2colKernel, map_.m, map_.k, a.x, col, a.stream,
                         "implicit_gemm_wgmma wgrad: im2col launch"));
    RETURN_IF_ERROR(Pass(&DyTransposeKernel, map_.k, map_.cout, a.dy, dyt, a.stream,
                         "implicit_gemm_wgmma wgrad: dy transpose launch"));
    RunArgs f;
    f.x = col;
    f.w = dyt;
    f.y = a.dw;
    f.workspace = base + col_bytes_ + dyt_bytes_;
    f.workspace_bytes = forward_->workspace_bytes();
    f.stream = a.stream;
    return forward_->Run(f);
  }

 private:
  // One of the two passes: `rows` block rows of `columns` threads, src into dst.
  absl::Status Pass(void (*kernel)(const float*, float*, Im2colMap), int columns, int rows,
                    const float* src, float* dst, cudaStream_t stream, const char* what) const {
    return CudaStatus(
        LaunchPdl(/*pdl=*/false, kernel,
                  dim3(static_cast<unsigned>(CeilDiv(columns, kIm2colThreads)),
                       static_cast<unsigned>(rows)),
                  dim3(kIm2colThreads), size_t{0}, stream, src, dst, map_),
        what);
  }

  Im2colMap map_;
  size_t col_bytes_, dyt_bytes_;
  std::unique_ptr<Runner> forward_;
};

// At K <= kMaxContractReduction (where the im2col form applies) wgrad's own GEMM measured 1.49
// to 2.33x its model over ten 7x7-output layers (H100, PERF.md round 106: the x gather its model
// does not count), the im2col form 0.82-1.33x its own. The form is taken where its model beats
// the GEMM's times this factor, the one that orders the ten as measured but for two of
// EfficientNet's, within 9 us.
constexpr double kShortGatherFactor = 1.55;

// The im2col form's time beside its forward: x and dy read, col and dyt written (the forward's
// model reads them back), two launches.
double Im2colSeconds(const Shape& s) {
  const double k = static_cast<double>(s.batch * s.out_h() * s.out_w());
  const double bytes = 4.0 * (k * static_cast<double>(s.reduction()) +
                              static_cast<double>(s.input_elements()) +
                              2.0 * static_cast<double>(s.output_elements()));
  return bytes / 3e12 + 6e-6;
}

// Where the filter is split: by the rule (kSplitBMaxMTiles), or forced for measurement.
enum class SplitPath { kByRule, kSplitKernel, kInKernel };
// wgrad's form: by the model, or forced for measurement.
enum class WgradForm { kByModel, kGemm, kIm2col };

// Whether the device runs the kernels at BN: wgmma (sm_90), the schedule's slots, the shared
// memory.
absl::Status CheckDevice(const DeviceInfo& device, int bn) {
  if (!device.is_sm90()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "implicit_gemm_wgmma needs an sm_90 (Hopper) device for wgmma; device ", device.ordinal,
        " (", device.name, ") is sm_", device.cc_major, device.cc_minor));
  }
  if (device.sm_count * CtasPerSm(bn) > kMaxSlots) {
    return absl::FailedPreconditionError(absl::StrCat(
        "implicit_gemm_wgmma schedules at most ", kMaxSlots, " CTAs at once; device ",
        device.ordinal, " has ", device.sm_count, " SMs"));
  }
  const int smem = bn == 128  ? Config<128>::kSmemBytes
                   : bn == 64 ? Config<64>::kSmemBytes
                              : Config<32>::kSmemBytes;
  if (static_cast<size_t>(smem) > device.shared_memory_per_block_optin) {
    return absl::FailedPreconditionError(absl::StrCat(
        "implicit_gemm_wgmma needs ", smem, " bytes of shared memory per block; the device "
        "allows ", device.shared_memory_per_block_optin));
  }
  return absl::OkStatus();
}

// What the proposal carries: the tile width, the kernel's parameters (the schedule over the
// device's SMs included) and the split filter's workspace.
struct WgmmaConfig {
  int bn = 0;
  Params params;
  int64_t split_bytes = 0;
  bool split_b = false;  // the filter split inside the main kernel (kSplitB): one launch
  wgrad_split::SplitK wgrad_split;  // wgrad: the split of K
  bool wgrad_swapped = false;  // wgrad: computed on SwappedWgrad(shape), params and split its
  bool wgrad_im2col = false;   // wgrad: the forward of Im2colForward(shape), the rest its
};

class ImplicitGemmWgmma : public AlgorithmWithConfig<WgmmaConfig> {
 public:
  // form: the lab's variants whose wgrad is always wgrad's own GEMM or always the im2col form
  // (measurement, and tests of each where the model takes the other).
  // dgrad_form: the lab's variants whose dgrad is always the stride phases or always the fold.
  explicit ImplicitGemmWgmma(SplitPath path, WgradForm form = WgradForm::kByModel,
                             DgradForm dgrad_form = DgradForm::kByModel)
      : path_(path), form_(form), dgrad_form_(dgrad_form) {}
  std::string name() const override {
    if (form_ == WgradForm::kGemm) return "implicit_gemm_wgmma_wgrad_gemm";
    if (form_ == WgradForm::kIm2col) return "implicit_gemm_wgmma_wgrad_im2col";
    if (dgrad_form_ == DgradForm::kPhases) return "implicit_gemm_wgmma_dgrad_phases";
    if (dgrad_form_ == DgradForm::kFold) return "implicit_gemm_wgmma_dgrad_fold";
    switch (path_) {
      case SplitPath::kSplitKernel: return "implicit_gemm_wgmma_split_kernel";
      case SplitPath::kInKernel: return "implicit_gemm_wgmma_split_in_kernel";
      default: return "implicit_gemm_wgmma";
    }
  }
  DgradForm dgrad_form() const override { return dgrad_form_; }
  // Fitted by tools/fit_auto.py (docs/data/round45_fit_*.json). The forced paths (measurement
  // only) are never ranked: auto must choose the same with the lab registered.
  double calibration() const override {
    return path_ == SplitPath::kByRule && form_ == WgradForm::kByModel &&
                   dgrad_form_ == DgradForm::kByModel
               ? 0.810
               : std::numeric_limits<double>::infinity();
  }
  // Padding, stride and dilation in the gather's address arithmetic (AGather's kGeometry);
  // groups as a grouped GEMM (each N tile within one group: NTileOf).
  Geometry geometry() const override { return Geometry{true, true, true, true}; }
  // The forward, and (the rule's algorithm only) wgrad: implicit_gemm_wgmma_wgrad.h.
  bool Computes(Op op) const override {
    return op == Op::kFprop || (op == Op::kWgrad && path_ == SplitPath::kByRule);
  }
  // wgrad: each slice's sum is a blocked fp32 sum of at most kMaxContractReduction terms, the
  // slices added in double (wgrad_split.h), as implicit_gemm_3xtf32's.
  absl::Status WithinContract(const Shape& shape) const override {
    if (shape.op == Op::kWgrad) return WgradSplitK(shape, ChooseBN(shape)).status();
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The time: the schedule's cost on the device's SMs (ChooseSchedule: the longest CTA's k-tiles
  // plus a prologue and epilogue per unit) at three TF32 products per term and ~300 TFLOP/s per
  // H200 (three fifths of the dense TF32 peak; an SM shared by its CTAs; the cnn suite measured
  // ~1.08x the model's times at 330), plus the minimal bytes, the split filter's writes and reads
  // and one pass over the tail's outputs at 3 TB/s, plus 8 us for the two launches. (That pass
  // was the zeroing the atomics' tail needed; the fixed-order tail instead sends its pieces
  // through the workspace, mostly in L2. The term is kept as fitted, so auto's picks stand.)
  absl::StatusOr<WgmmaConfig> Choose(const Shape& s, const DeviceInfo& device,
                                     double* seconds) const override {
    if (s.op == Op::kWgrad) return ChooseWgrad(s, device, seconds);
    RETURN_IF_ERROR(CheckIndexing(s));
    const bool geometry = s.padded() || s.strided() || s.dilated() || s.grouped();
    if (geometry && (s.kernel_h > implicit_gemm_view::kMaxGeometryTaps ||
                     s.kernel_w > implicit_gemm_view::kMaxGeometryTaps)) {
      return absl::UnimplementedError(absl::StrCat(
          "implicit_gemm_wgmma: padding, stride, dilation or groups with a kernel of more than ",
          implicit_gemm_view::kMaxGeometryTaps, " taps a side (its tap masks' width)"));
    }
    const int64_t k = s.reduction();
    if (k > kMaxReduction) {
      return absl::UnimplementedError(absl::StrCat(
          "implicit_gemm_wgmma: reduction length (Cin/groups)*Kh*Kw = ", k, " exceeds ",
          kMaxReduction,
          ", beyond which its blocked fp32 accumulation is not verified to meet the accuracy bar"));
    }
    WgmmaConfig c;
    c.bn = ChooseBN(s);
    c.split_bytes = SplitFilterBytes(s, c.bn);
    if (c.split_bytes > kMaxSplitFilterBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "implicit_gemm_wgmma: the split filter would take ", c.split_bytes,
          " bytes of workspace; the limit is ", kMaxSplitFilterBytes));
    }
    RETURN_IF_ERROR(CheckDevice(device, c.bn));
    const int sms = device.sm_count;
    c.params = ParamsFor(s, c.bn, sms);
    // The in-kernel split where it is possible (whole tiles, no groups), the filter is split
    // again by few M tiles (each splits its own copy) and a stage's tile is 8 values a copy
    // thread (BN = 32: two batches of loads; at BN = 128, eight batches a stage measured 0.024
    // against the split kernel's 0.018 ms): a tiny problem's one launch (PERF.md round 91).
    const bool split_b_possible = !s.grouped() && c.params.tail_ctas == 0;
    switch (path_) {
      case SplitPath::kByRule:
        c.split_b = split_b_possible && c.bn == 32 && c.params.m_tiles <= kSplitBMaxMTiles;
        break;
      case SplitPath::kSplitKernel: c.split_b = false; break;
      case SplitPath::kInKernel:
        if (!split_b_possible) {
          return absl::UnimplementedError(
              "implicit_gemm_wgmma_split_in_kernel: grouped, or the schedule has a stream-K tail");
        }
        c.split_b = true;
        break;
    }
    const int64_t tiles = NumTiles(s, c.bn);
    const int k_tiles = static_cast<int>((k + kBK - 1) / kBK);
    const Schedule sched = ChooseSchedule(tiles, k_tiles, sms * CtasPerSm(c.bn), TailMargin(c.bn));
    const double ktile_seconds = 3.0 * 2.0 * kBM * c.bn * kBK / (300e12 / sms / CtasPerSm(c.bn));
    const double tail_outputs = static_cast<double>(tiles - sched.dp_tiles) * kBM * c.bn;
    const double split_bytes = c.split_b ? 0.0 : 1.5 * static_cast<double>(c.split_bytes);
    const double bytes = s.min_bytes() + split_bytes + 4.0 * tail_outputs;
    // With the whole reduction in one k-tile (Cin*Kh*Kw <= kBK: 1x1 layers of 16-32 channels)
    // every CTA streams its pixels in and its outputs out, and the CTAs on an SM overlap one's
    // copies with another's products: the time is the longer of the two, not their sum (round
    // 87: 0.031 / 0.070 / 0.040 ms measured on the nets suite's three such layers against a
    // summed model of 0.059 / 0.168 / 0.080, which ranked it behind a 4-28x slower pick).
    const double compute = sched.cost * ktile_seconds, memory = bytes / 3e12;
    // Launches: 8 us for two, 4 us for the in-kernel split's one.
    *seconds = (k_tiles == 1 ? std::max(compute, memory) : compute + memory) +
               (c.split_b ? 4e-6 : 8e-6);
    return c;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const WgmmaConfig& c,
                                                const DeviceInfo&) const override {
    if (s.op == Op::kWgrad && c.wgrad_im2col) {
      absl::StatusOr<std::unique_ptr<Runner>> forward = BuildForward(c);
      if (!forward.ok()) return forward.status();
      return std::unique_ptr<Runner>(new WgmmaWgradIm2colRunner(s, *std::move(forward)));
    }
    if (s.op == Op::kWgrad) {
      switch (c.bn) {
        case 128: RETURN_IF_ERROR(EnableSmemWgrad<128>()); break;
        case 64: RETURN_IF_ERROR(EnableSmemWgrad<64>()); break;
        case 32: RETURN_IF_ERROR(EnableSmemWgrad<32>()); break;
        default:
          return absl::InternalError(
              absl::StrCat("implicit_gemm_wgmma: no kernel for BN = ", c.bn));
      }
      return std::unique_ptr<Runner>(new WgmmaWgradRunner(
          c.wgrad_swapped ? SwappedWgrad(s) : s, c.bn, c.params, c.wgrad_split, c.wgrad_swapped));
    }
    return BuildForward(c);
  }

 private:
  static absl::StatusOr<std::unique_ptr<Runner>> BuildForward(const WgmmaConfig& c) {
    switch (c.bn) {
      case 128: RETURN_IF_ERROR(EnableSmemAll<128>()); break;
      case 64: RETURN_IF_ERROR(EnableSmemAll<64>()); break;
      case 32: RETURN_IF_ERROR(EnableSmemAll<32>()); break;
      default:
        return absl::InternalError(absl::StrCat("implicit_gemm_wgmma: no kernel for BN = ", c.bn));
    }
    return std::unique_ptr<Runner>(
        new ImplicitGemmWgmmaRunner(c.bn, c.params, c.split_bytes, c.split_b));
  }

  // wgrad: the device checks as the forward's, the split of K, and the time: the longest CTA's
  // units (each its slice's k-tiles plus a prologue and epilogue) at the forward's rate, plus the
  // bytes (x and dy once, dw, the partials written and read; with centring dy once more) at
  // 3 TB/s, plus the launches (the GEMM's, the slices' sum, the centring's two).
  absl::StatusOr<WgmmaConfig> ChooseWgrad(const Shape& s, const DeviceInfo& device,
                                          double* seconds) const {
    // Depthwise (groups, one input channel each): the tile's 128 rows would hold Kh*Kw taps of
    // one channel (9 or 25 in the nets), a few percent of the tensor core's work. The depthwise
    // algorithm's own wgrad takes these; the model's launch terms alone would rank this one
    // first on tiny ones.
    if (s.grouped() && s.in_per_group() == 1) {
      return absl::UnimplementedError(
          "implicit_gemm_wgmma wgrad: groups of one input channel (depthwise): a grouped GEMM "
          "would fill a few percent of its tiles; the depthwise algorithm computes it");
    }
    absl::StatusOr<WgmmaConfig> c = ChooseWgradGemm(s, device, seconds);
    if (form_ == WgradForm::kGemm || !Im2colTakes(s)) {
      if (form_ == WgradForm::kIm2col) {
        return absl::UnimplementedError(
            "implicit_gemm_wgmma_wgrad_im2col: the im2col form takes ungrouped wgrads of at most "
            "4608 terms (batch*out_h*out_w) and Cin*Kh*Kw a multiple of 4");
      }
      return c;
    }
    // The im2col form where its model is faster, both timed on kSplitSms SMs and its forward
    // scheduled for them (its stream-K tail would otherwise cut the sums by the device's SM
    // count): dw is the same, bit for bit, on every GPU.
    DeviceInfo fixed = device;
    fixed.sm_count = kSplitSms;
    double gemm_seconds = std::numeric_limits<double>::infinity(), im2col_seconds = 0;
    if (c.ok() && !ChooseWgradGemm(s, fixed, &gemm_seconds).ok()) return c;
    absl::StatusOr<WgmmaConfig> f = Choose(Im2colForward(s), fixed, &im2col_seconds);
    if (!f.ok()) return form_ == WgradForm::kIm2col ? f : c;
    im2col_seconds += Im2colSeconds(s);
    if (form_ != WgradForm::kIm2col && im2col_seconds >= kShortGatherFactor * gemm_seconds) {
      return c;
    }
    f->wgrad_im2col = true;
    *seconds = im2col_seconds;
    return f;
  }

  // wgrad's own GEMM (implicit_gemm_wgmma_wgrad.h), in the orientation its model prefers.
  absl::StatusOr<WgmmaConfig> ChooseWgradGemm(const Shape& s, const DeviceInfo& device,
                                              double* seconds) const {
    absl::StatusOr<WgmmaConfig> c = ChooseWgradOriented(s, device, seconds);
    if (!c.ok() || !CanSwapWgrad(s)) return c;
    // The swapped orientation where its model is faster (few input channels against many
    // output channels: the tile's 128 rows on the output channels), plus dw's transpose. The
    // two orientations round differently (other tiles, other slices), so the choice is made on
    // kSplitSms SMs, as the slices are: dw is the same, bit for bit, on every GPU.
    DeviceInfo fixed = device;
    fixed.sm_count = kSplitSms;
    double plain_seconds = 0, swapped_seconds = 0;
    const Shape t = SwappedWgrad(s);
    if (!ChooseWgradOriented(s, fixed, &plain_seconds).ok()) return c;
    if (!ChooseWgradOriented(t, fixed, &swapped_seconds).ok()) return c;
    if (swapped_seconds + SwappedTransposeSeconds(s) >= plain_seconds) return c;
    double on_device = 0;
    absl::StatusOr<WgmmaConfig> swapped = ChooseWgradOriented(t, device, &on_device);
    if (!swapped.ok()) return c;
    *seconds = on_device + SwappedTransposeSeconds(s);
    swapped->wgrad_swapped = true;
    return swapped;
  }

  absl::StatusOr<WgmmaConfig> ChooseWgradOriented(const Shape& s, const DeviceInfo& device,
                                                  double* seconds) const {
    RETURN_IF_ERROR(CheckWgradIndexing(s));
    RETURN_IF_ERROR(CheckDevice(device, ChooseBN(s)));
    WgmmaConfig c;
    c.bn = ChooseBN(s);
    absl::StatusOr<wgrad_split::SplitK> split = WgradSplitK(s, c.bn);
    if (!split.ok()) return split.status();
    c.wgrad_split = *split;
    const int slots = device.sm_count * CtasPerSm(c.bn);
    c.params = MakeWgradParams(s, c.bn, slots, c.wgrad_split);
    if (int64_t{c.params.units} + kMaxSlots > std::numeric_limits<int32_t>::max()) {
      return absl::OutOfRangeError(absl::StrCat("implicit_gemm_wgmma wgrad: ", c.params.units,
                                                " work units exceed its 32-bit walk"));
    }
    const int64_t rounds = (int64_t{c.params.units} + slots - 1) / slots;
    const double ktile_seconds =
        3.0 * 2.0 * kBM * c.bn * kBK / (300e12 / device.sm_count / CtasPerSm(c.bn));
    const double compute =
        static_cast<double>(rounds) * (c.params.slice_tiles + kUnitOverhead) * ktile_seconds;
    const bool centred = wgrad_split::Centres(c.params.k);
    double bytes = s.min_bytes() + 2.0 * static_cast<double>(
                                             wgrad_split::WorkspaceBytes(s, c.wgrad_split));
    double launch = 4e-6;
    if (c.wgrad_split.slices > 1 || centred) launch += 3e-6;
    if (centred) {
      bytes += 4.0 * static_cast<double>(s.output_elements());
      launch += 4e-6;
    }
    *seconds = compute + bytes / 3e12 + launch;
    return c;
  }

  SplitPath path_;
  WgradForm form_;
  DgradForm dgrad_form_;
};

}  // namespace
}  // namespace implicit_gemm_wgmma_internal

std::unique_ptr<Algorithm> MakeImplicitGemmWgmma() {
  return std::make_unique<implicit_gemm_wgmma_internal::ImplicitGemmWgmma>(
      implicit_gemm_wgmma_internal::SplitPath::kByRule);
}

std::unique_ptr<Algorithm> MakeImplicitGemmWgmmaWgradForced(bool im2col) {
  using implicit_gemm_wgmma_internal::WgradForm;
  return std::make_unique<implicit_gemm_wgmma_internal::ImplicitGemmWgmma>(
      implicit_gemm_wgmma_internal::SplitPath::kByRule,
      im2col ? WgradForm::kIm2col : WgradForm::kGemm);
}

std::unique_ptr<Algorithm> MakeImplicitGemmWgmmaDgradForced(bool fold) {
  using implicit_gemm_wgmma_internal::WgradForm;
  return std::make_unique<implicit_gemm_wgmma_internal::ImplicitGemmWgmma>(
      implicit_gemm_wgmma_internal::SplitPath::kByRule, WgradForm::kByModel,
      fold ? Algorithm::DgradForm::kFold : Algorithm::DgradForm::kPhases);
}

std::unique_ptr<Algorithm> MakeImplicitGemmWgmmaForced(bool split_in_kernel) {
  return std::make_unique<implicit_gemm_wgmma_internal::ImplicitGemmWgmma>(
      split_in_kernel ? implicit_gemm_wgmma_internal::SplitPath::kInKernel
                      : implicit_gemm_wgmma_internal::SplitPath::kSplitKernel);
}

}  // namespace conv2d
