// "implicit_gemm_3xtf32": implicit-GEMM convolution on the tensor cores with mma.sync m16n8k8 TF32
// (sm_80 PTX, runs on sm_90), each product split into three TF32 products. See the header for
// the GEMM view and the tiling.
//
// Why the error stays inside |y - y64| <= 1e-3 + 1e-3|y64|:
//  - Products. The split of conv/arch/split_3xtf32.h: v = hi + lo, hi = v rounded to TF32,
//    lo = v - hi (exact) handed to the tensor core unrounded; a_lo*b_lo is dropped. Each product
//    is off by at most ~2^-21|ab| (half of it the dropped a_lo*b_lo), with random sign: over
//    131072 terms of U(-1,1) inputs that is ~1e-5 rms, negligible.
//  - Accumulation. The tensor core adds into its fp32 accumulator without IEEE round-to-nearest
//    (published measurements on A100 show truncation). Modelled pessimistically -- every mma
//    returns its exact sum rounded toward zero, a bias of about half an ulp of the partial sum
//    per mma, three mma per 8 terms -- one accumulator over K = 131072 terms is off by 0.14 rms
//    (65x the tolerance of an output near zero: the partial sums reach ~100 while the tolerance
//    there is 1e-3), and even K = 4608 (512 channels, 3x3) reaches 1.07x.
//    Blocked accumulation bounds the partial sums the biased rounding sees: the mma accumulators
//    take kFoldTiles*kBK = 128 terms, then are added (IEEE fp32, round to nearest: unbiased)
//    into a second register set and reset. The chunk error grows like L^1.5 per chunk and the
//    chunks' errors have random signs, so the total is ~ L*sqrt(K) instead of K^1.5. The same
//    model then gives, for K = 131072: 1.4e-4 rms (outer fp32 sum included; with an fp64 outer
//    sum 1.37e-4, so the inner chunks dominate and fp64 would buy nothing), and for K = 4608
//    2.6e-5 rms: a worst ratio of ~0.5 over the ~1% of outputs that lie near zero.
//    (Model: implicit_gemm_3xtf32_cpu_test's AccuracyModel replays it.)
//  - Beyond K = kMaxReduction (2x the largest case measured) the margin is unverified, so
//    CanImplement declines.
//
// Cost of the fold: one FADD and one MOV per accumulator per 128 terms, about 4% of the issue
// slots of the main loop; an fp64 fold would need an F2F (a quarter-rate pipe) and twice the
// registers, costing the second resident block per SM.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/arch/cp_async.cuh"
#include "conv/arch/mma_sync.cuh"
#include "conv/arch/split_3xtf32.h"
#include "conv/core/bias.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32_backward.h"

namespace conv2d {
namespace implicit_gemm_3xtf32_internal {

// The largest reduction length (Cin*Kh*Kw) accepted: twice the longest one measured (131072).
constexpr int64_t kMaxReduction = int64_t{1} << 18;

GemmDims DimsOf(const Shape& s) {
  const int64_t p = s.out_h() * s.out_w();
  const int64_t taps = s.kernel_h * s.kernel_w;
  switch (s.op) {
    case Op::kDgrad:
      return {s.batch * s.height * s.width, s.in_per_group(), s.out_per_group() * taps};
    case Op::kWgrad:
      return {s.reduction(), s.out_per_group(), s.batch * p};
    case Op::kFprop:
      break;
  }
  return {s.batch * p, s.out_per_group(), s.reduction()};
}

absl::Status CheckIndexing(const Shape& s) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  absl::Status st = CheckFitsInt32(s, "implicit_gemm_3xtf32");
  if (!st.ok()) return st;
  const GemmDims d = DimsOf(s);
  // Indices the kernel forms past the ends: rows up to M + kBM, columns up to N + kBN per group,
  // k up to K + kBK. The forward's scalar gather forms a channel offset up to (Cin + kBK + 1)*H*W
  // while it steps past K; wgrad's dy gather an image offset up to (batch + 1)*Cout*out_h*out_w.
  bool fits = d.m + kBM <= kMax && s.groups * (d.n + kBN) <= kMax && d.k + kBK <= kMax &&
              NumTiles(s) <= kMax;
  if (s.op == Op::kFprop) fits = fits && (s.in_channels + kBK + 1) * s.height * s.width <= kMax;
  if (s.op == Op::kWgrad) fits = fits && s.output_elements() + s.out_channels * d.k / s.batch <= kMax;
  if (!fits) {
    return absl::OutOfRangeError(absl::StrCat(
        "implicit_gemm_3xtf32 indexes with 32-bit integers; shape ", s.ToString(),
        " leaves no room for its tile overhang"));
  }
  return absl::OkStatus();
}

int64_t NumTiles(const Shape& s) {
  const GemmDims d = DimsOf(s);
  return ((d.m + kBM - 1) / kBM) * s.groups * ((d.n + kBN - 1) / kBN);
}

absl::StatusOr<SplitK> ChooseSplitK(const Shape& s) {
  return wgrad_split::ChooseSplitK(s, NumTiles(s), kBK, "implicit_gemm_3xtf32");
}

Params MakeParams(const Shape& s) {
  Params p;
  implicit_gemm_view::SetGemmView(s, kBK, kBN, &p);
  p.og = static_cast<int>(s.out_per_group());
  p.cg = static_cast<int>(s.in_per_group());
  p.oh = static_cast<int>(s.out_h());
  p.red = static_cast<int>(s.reduction());
  p.cout_p = p.cout * p.p;
  p.div_hw = FastDiv(static_cast<uint32_t>(p.hw));
  p.div_w = FastDiv(static_cast<uint32_t>(p.w));
  p.div_sh = FastDiv(static_cast<uint32_t>(p.sh));
  p.div_sw = FastDiv(static_cast<uint32_t>(p.sw));
  p.slice_stride = static_cast<int>(s.filter_elements());
  if (s.op == Op::kFprop) return p;
  const GemmDims d = DimsOf(s);
  p.m = static_cast<int>(d.m);
  p.k = static_cast<int>(d.k);
  p.k_tiles = static_cast<int>((d.k + kBK - 1) / kBK);
  p.n_group = static_cast<int>(d.n);
  p.n_tiles_group = static_cast<int>((d.n + kBN - 1) / kBN);
  p.n_tiles = static_cast<int>(s.groups) * p.n_tiles_group;
  p.div_n_tiles_group = FastDiv(static_cast<uint32_t>(p.n_tiles_group));
  p.slice_tiles = p.k_tiles;
  if (s.op == Op::kWgrad) {
    const absl::StatusOr<SplitK> split = ChooseSplitK(s);
    if (split.ok()) {
      p.slices = split->slices;
      p.slice_tiles = split->slice_tiles;
    }
    p.fold_tiles = WgradFoldTiles(d.k);
    p.center = wgrad_split::Centres(d.k);
    p.dy_runs = ChannelSumSplits(s.batch, s.out_channels, s.out_h() * s.out_w());
  }
  return p;
}

namespace {

// f(mi, ni) for each of the warp's mma tiles, unrolled: the accumulators stay in registers.
template <class F>
__device__ __forceinline__ void ForEachMmaTile(F&& f) {
#pragma unroll
  for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
    for (int ni = 0; ni < kMmaTilesN; ++ni) f(mi, ni);
}

// One block computes a kBM x kBN tile of the GEMM of operation Op (implicit_gemm_3xtf32.h's
// FpropOp says what an operation supplies) over its k-tiles, streaming them through a
// kStages-deep cp.async ring: fprop (a = x, b = w, c = y), dgrad (dy, w, dx), wgrad (x, dy, dw or
// the slices' partials).
template <class Op>
__global__ void __launch_bounds__(kThreads, 2)
    ImplicitGemm3xTf32Kernel(const float* __restrict__ a_src, const float* __restrict__ b_src,
                             float* __restrict__ c_dst, const Params p) {
  __shared__ __align__(16) float smem[kStages * kStageFloats];

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int tile = static_cast<int>(blockIdx.x);
  const int m_tile = tile / p.n_tiles;
  const int n_tile = tile - m_tile * p.n_tiles;

  Op op;
  op.Init(p, m_tile, n_tile, static_cast<int>(blockIdx.y), tid);
  const int m0 = op.m0;
  const int n0 = op.n0;
  const int kt_begin = op.KBegin(p);
  const int kt_end = op.KEnd(p);

  auto load_tile = [&](int kt, int stage) {
    float* sa = smem + stage * kStageFloats;
    float* sb = sa + kAStageFloats;
    op.ForEachA(p, kt, [&](int s, int g, bool valid) {
      CpAsync<4 * Op::kACopy>(sa + s, a_src + g, valid);
    });
    op.ForEachB(p, kt, [&](int s, int g, bool valid) {
      CpAsync<4 * Op::kBCopy>(sb + s, b_src + g, valid);
    });
  };

  // Prologue: k-tiles 0 .. kStages-2 in flight, one commit group each (empty past the end, so
  // that the group count, and hence the wait below, is the same on every path).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (kt_begin + s < kt_end) load_tile(kt_begin + s, s);
    CpAsyncCommit();
  }

  float acc[kMmaTilesM][kMmaTilesN][4];  // the current chunk of <= 128 terms
  float sum[kMmaTilesM][kMmaTilesN][4];  // the chunks so far
  ForEachMmaTile([&](int mi, int ni) {
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[mi][ni][r] = sum[mi][ni][r] = 0.f;
  });

  const int warp_m0 = WarpM0(warp);
  const int warp_n0 = WarpN0(warp);
  int stage = 0;       // the stage holding k-tile kt
  int fold_count = 0;  // k-tiles in acc
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    // Groups committed so far: kStages-1 + kt; all but the newest kStages-2 are complete, so
    // k-tile kt has landed (this thread's copies), and the barrier publishes everyone's. It also
    // tells us every warp is done with k-tile kt-1, whose stage the next load overwrites.
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    {
      const int next = kt + kStages - 1;
      int next_stage = stage + kStages - 1;
      if (next_stage >= kStages) next_stage -= kStages;
      if (next < kt_end) load_tile(next, next_stage);
      CpAsyncCommit();
    }

    const float* sa = smem + stage * kStageFloats;
    const float* sb = sa + kAStageFloats;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 8) {
      uint32_t a_hi[kMmaTilesM][4], a_lo[kMmaTilesM][4];
      uint32_t b_hi[kMmaTilesN][2], b_lo[kMmaTilesN][2];
#pragma unroll
      for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          SplitTf32(op.A(sa[AFragIndex(warp_m0, mi, kk, lane, r)], mi, r), a_hi[mi][r],
                    a_lo[mi][r]);
#pragma unroll
      for (int ni = 0; ni < kMmaTilesN; ++ni)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          SplitTf32(sb[BFragIndex(warp_n0, ni, kk, lane, r)], b_hi[ni][r], b_lo[ni][r]);
      // The small cross terms first; each pass touches all 8 accumulators, so consecutive mma on
      // one accumulator are 8 instructions apart. (Written out: through ForEachMmaTile the
      // compiler emits different code for them, not measured.)
#pragma unroll
      for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kMmaTilesN; ++ni) MmaTf32(acc[mi][ni], a_lo[mi], b_hi[ni]);
#pragma unroll
      for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kMmaTilesN; ++ni) MmaTf32(acc[mi][ni], a_hi[mi], b_lo[ni]);
#pragma unroll
      for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kMmaTilesN; ++ni) MmaTf32(acc[mi][ni], a_hi[mi], b_hi[ni]);
    }

    if (++fold_count == (Op::kFold != 0 ? Op::kFold : p.fold_tiles)) {
      fold_count = 0;
      ForEachMmaTile([&](int mi, int ni) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          sum[mi][ni][r] = __fadd_rn(sum[mi][ni][r], acc[mi][ni][r]);
          acc[mi][ni][r] = 0.f;
        }
      });
    }
    if (++stage == kStages) stage = 0;
  }
  // Only empty groups can still be pending; drain them so no copy outlives the block.
  CpAsyncWait<0>();

  // Epilogue: in y and dx (NCHW) consecutive pixels of a channel are consecutive floats, as in
  // dw consecutive taps of a filter: a warp's store covers 8 rows x 4 columns, four 32-byte
  // segments.
  int y_row[kMmaTilesM][2];
#pragma unroll
  for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      int ml, nl;
      CFragCoord(warp_m0, warp_n0, mi, 0, lane, 2 * half, &ml, &nl);
      const int m = m0 + ml;
      y_row[mi][half] = op.RowBase(p, m);
    }
  ForEachMmaTile([&](int mi, int ni) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      int ml, nl;
      CFragCoord(warp_m0, warp_n0, mi, ni, lane, r, &ml, &nl);
      const int row = y_row[mi][r >> 1];
      const int n = n0 + nl;
      if (row >= 0 && n < op.NLimit(p)) {
        c_dst[row + n * op.ColStride(p)] = __fadd_rn(sum[mi][ni][r], acc[mi][ni][r]);
      }
    }
  });
}

template <class Op>
void Launch(dim3 grid, cudaStream_t stream, const float* a, const float* b, float* c,
            const Params& p) {
  ImplicitGemm3xTf32Kernel<Op><<<grid, kThreads, 0, stream>>>(a, b, c, p);
}

class ImplicitGemm3xTf32Runner : public Runner {
 public:
  ImplicitGemm3xTf32Runner(const Shape& s, const Params& p)
      : op_(s.op),
        shape_(s),
        p_(p),
        tiles_(static_cast<unsigned>(NumTiles(s))),
        filter_(static_cast<int>(s.filter_elements())),
        workspace_(s.op == Op::kWgrad ? WgradWorkspaceBytes(s, SplitK{p.slices, p.slice_tiles})
                                      : 0) {}
  size_t workspace_bytes() const override { return workspace_; }

  absl::Status Run(const RunArgs& a) const override {
    switch (op_) {
      case Op::kFprop:
        RunFprop(a);
        break;
      case Op::kDgrad:
        Launch<DgradOp>(dim3(tiles_), a.stream, a.dy, a.w, a.dx, p_);
        break;
      case Op::kWgrad:
        if (p_.slices == 1 && !p_.center) {
          Launch<WgradOp<false>>(dim3(tiles_), a.stream, a.x, a.dy, a.dw, p_);
          break;
        }
        RETURN_IF_ERROR(RunWgradSlices(a));
        break;
    }
    return LaunchStatus("implicit_gemm_3xtf32 kernel launch");
  }

 private:
  void RunFprop(const RunArgs& a) const {
    const bool vec_a = CanVectorizeA(p_, reinterpret_cast<uintptr_t>(a.x));
    const bool vec_b = CanVectorizeB(p_, reinterpret_cast<uintptr_t>(a.w));
    const dim3 grid(tiles_);
    if (vec_a && vec_b) {
      Launch<FpropOp<true, true>>(grid, a.stream, a.x, a.w, a.y, p_);
    } else if (vec_a) {
      Launch<FpropOp<true, false>>(grid, a.stream, a.x, a.w, a.y, p_);
    } else if (vec_b) {
      Launch<FpropOp<false, true>>(grid, a.stream, a.x, a.w, a.y, p_);
    } else {
      Launch<FpropOp<false, false>>(grid, a.stream, a.x, a.w, a.y, p_);
    }
  }

  // Partial dw per slice in the workspace (then, where x is centred, its channel centres and
  // dy's channel sums), summed in double (wgrad_split::SumSlices).
  absl::Status RunWgradSlices(const RunArgs& a) const {
    const SplitK split{p_.slices, p_.slice_tiles};
    const wgrad_split::Buffers b = wgrad_split::Carve(a.workspace, shape_, split);
    wgrad_split::Sum sum = SumOf(p_);
    RETURN_IF_ERROR(wgrad_split::Centre(shape_, a.x, a.dy, b, &sum, a.stream));
    Params p = p_;
    p.centers = sum.centers;
    p.dy_sums = sum.dy_sums;
    const dim3 grid(tiles_, static_cast<unsigned>(p.slices));
    if (p.center) {
      Launch<WgradOp<true>>(grid, a.stream, a.x, a.dy, b.part, p);
    } else {
      Launch<WgradOp<false>>(grid, a.stream, a.x, a.dy, b.part, p);
    }
    RETURN_IF_ERROR(LaunchStatus("implicit_gemm_3xtf32 wgrad kernel launch"));
    return wgrad_split::SumSlices(sum, b.part, a.dw, filter_, a.stream);
  }

  Op op_;
  Shape shape_;
  Params p_;
  unsigned tiles_;
  int filter_;
  size_t workspace_;
};

// One algorithm for the three operations; the proposal carries the kernel's parameters (wgrad's
// split included): there is no tile to choose.
class ImplicitGemm3xTf32 : public AlgorithmWithConfig<Params> {
 public:
  std::string name() const override { return "implicit_gemm_3xtf32"; }
  // Fitted by tools/fit_auto.py (docs/data/round45_fit_*.json), on the forward only.
  double calibration() const override { return 2.600; }
  bool Computes(Op) const override { return true; }
  // The backward takes any geometry (its gathers test every tap); the forward kernel only the
  // basic form, which Choose says.
  Geometry geometry() const override { return Geometry{true, true, true, true}; }
  // fprop and dgrad: one blocked fp32 sum per element over Shape::terms() nonzero terms (dgrad's
  // masked taps add exact zeros), the direct-summation rule. wgrad: each slice's sum is such a
  // sum of at most kMaxSliceTiles*kBK = kMaxContractReduction terms, and the slices are added in
  // double, exactly enough that its rounding does not grow with K: the error per element is that
  // of the worst slice's, whatever batch*out_h*out_w.
  absl::Status WithinContract(const Shape& shape) const override {
    if (shape.op != Op::kWgrad) return DirectSummationWithinContract(shape);
    return ChooseSplitK(shape).status();
  }

 protected:
  // The time: a roofline of three TF32 products per term on the padded tiles at ~300 TFLOP/s
  // (about 60% of the H200's dense TF32 peak, what mma.sync tends to reach), the minimal bytes
  // at 3 TB/s, 5 us of launch and tail; calibration() corrects it. dgrad's padded K counts every
  // tap, the masked ones included (the stride's waste); wgrad adds its partials, written once and
  // read once, and the reduction's launch.
  absl::StatusOr<Params> Choose(const Shape& s, const DeviceInfo&,
                                double* seconds) const override {
    if (s.op == Op::kFprop && !s.basic()) {
      return absl::UnimplementedError(
          "implicit_gemm_3xtf32 computes the forward in the basic form only (no padding, stride, "
          "dilation or groups); its backward takes any geometry");
    }
    RETURN_IF_ERROR(CheckIndexing(s));
    const GemmDims d = DimsOf(s);
    if (s.op != Op::kWgrad && d.k > kMaxReduction) {
      return absl::UnimplementedError(absl::StrCat(
          "implicit_gemm_3xtf32: reduction length ", d.k, " (", OpName(s.op), ") exceeds ",
          kMaxReduction,
          ", beyond which its blocked fp32 accumulation is not verified to meet the accuracy bar"));
    }
    double bytes = s.min_bytes();
    double launch = 5e-6;
    if (s.op == Op::kWgrad) {
      absl::StatusOr<SplitK> split = ChooseSplitK(s);
      if (!split.ok()) return split.status();
      bytes += 2.0 * static_cast<double>(WgradWorkspaceBytes(s, *split));
      if (split->slices > 1) launch += 3e-6;
      if (wgrad_split::Centres(d.k)) {  // the channel sums: dy once more, two launches
        bytes += 4.0 * static_cast<double>(s.output_elements());
        launch += 4e-6;
      }
    }
    const double padded_flops = 2.0 * static_cast<double>(NumTiles(s)) * kBM * kBN *
                                static_cast<double>((d.k + kBK - 1) / kBK * kBK);
    *seconds = 3.0 * padded_flops / 300e12 + bytes / 3e12 + launch;
    return MakeParams(s);
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Params& p,
                                                const DeviceInfo&) const override {
    return std::unique_ptr<Runner>(new ImplicitGemm3xTf32Runner(s, p));
  }
};

}  // namespace
}  // namespace implicit_gemm_3xtf32_internal

std::unique_ptr<Algorithm> MakeImplicitGemm3xTf32() {
  return std::make_unique<implicit_gemm_3xtf32_internal::ImplicitGemm3xTf32>();
}

}  // namespace conv2d
