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

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/arch/cp_async.cuh"
#include "conv/arch/split_3xtf32.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32.h"

namespace conv2d {
namespace implicit_gemm_3xtf32_internal {

// The largest reduction length (Cin*Kh*Kw) accepted: twice the longest one measured (131072).
constexpr int64_t kMaxReduction = int64_t{1} << 18;

absl::Status CheckIndexing(const Shape& s) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  absl::Status st = CheckFitsInt32(s, "implicit_gemm_3xtf32");
  if (!st.ok()) return st;
  const int64_t m = s.batch * s.out_h() * s.out_w();
  const int64_t k = s.in_channels * s.kernel_h * s.kernel_w;
  // Indices the kernel forms past the ends: pixel columns up to M + kBM, channels up to
  // Cout + kBN, k up to K + kBK, and the scalar gather's channel offset up to
  // (Cin + kBK + 1)*H*W while it steps past K.
  if (m + kBM > kMax || s.out_channels + kBN > kMax || k + kBK > kMax ||
      (s.in_channels + kBK + 1) * s.height * s.width > kMax || NumTiles(s) > kMax) {
    return absl::OutOfRangeError(absl::StrCat(
        "implicit_gemm_3xtf32 indexes with 32-bit integers; shape ", s.ToString(),
        " leaves no room for its tile overhang"));
  }
  return absl::OkStatus();
}

int64_t NumTiles(const Shape& s) {
  const int64_t m = s.batch * s.out_h() * s.out_w();
  return ((m + kBM - 1) / kBM) * ((s.out_channels + kBN - 1) / kBN);
}

Params MakeParams(const Shape& s) {
  Params p;
  implicit_gemm_view::SetGemmView(s, kBK, kBN, &p);
  return p;
}

namespace {

// d += a * b on a 16x8x8 TF32 tile, fp32 accumulation.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// f(mi, ni) for each of the warp's mma tiles, unrolled: the accumulators stay in registers.
template <class F>
__device__ __forceinline__ void ForEachMmaTile(F&& f) {
#pragma unroll
  for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
    for (int ni = 0; ni < kMmaTilesN; ++ni) f(mi, ni);
}

// One block computes a kBM x kBN tile of the GEMM (pixels x output channels) over all of K,
// streaming k-tiles of kBK through a kStages-deep cp.async ring.
template <bool kVecA, bool kVecB>
__global__ void __launch_bounds__(kThreads, 2)
    ImplicitGemm3xTf32Kernel(const float* __restrict__ x, const float* __restrict__ w,
                             float* __restrict__ y, const Params p) {
  __shared__ __align__(16) float smem[kStages * kStageFloats];

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int tile = static_cast<int>(blockIdx.x);
  const int m_tile = tile / p.n_tiles;
  const int n_tile = tile - m_tile * p.n_tiles;
  const int m0 = m_tile * kBM;
  const int n0 = n_tile * kBN;

  AGather<kVecA> a_gather;
  a_gather.Init(p, m0, tid);
  BGather<kVecB> b_gather;
  b_gather.Init(p, n0, tid);

  auto load_tile = [&](int kt, int stage) {
    float* sa = smem + stage * kStageFloats;
    float* sb = sa + kAStageFloats;
    a_gather.ForEach(p, kt, [&](int s, int g, bool valid) {
      CpAsync<kVecA ? 16 : 4>(sa + s, x + g, valid);
    });
    b_gather.ForEach(p, kt, [&](int s, int g, bool valid) {
      CpAsync<kVecB ? 16 : 4>(sb + s, w + g, valid);
    });
  };

  // Prologue: k-tiles 0 .. kStages-2 in flight, one commit group each (empty past the end, so
  // that the group count, and hence the wait below, is the same on every path).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < p.k_tiles) load_tile(s, s);
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
  for (int kt = 0; kt < p.k_tiles; ++kt) {
    // Groups committed so far: kStages-1 + kt; all but the newest kStages-2 are complete, so
    // k-tile kt has landed (this thread's copies), and the barrier publishes everyone's. It also
    // tells us every warp is done with k-tile kt-1, whose stage the next load overwrites.
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    {
      const int next = kt + kStages - 1;
      int next_stage = stage + kStages - 1;
      if (next_stage >= kStages) next_stage -= kStages;
      if (next < p.k_tiles) load_tile(next, next_stage);
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
          SplitTf32(sa[AFragIndex(warp_m0, mi, kk, lane, r)], a_hi[mi][r], a_lo[mi][r]);
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
        for (int ni = 0; ni < kMmaTilesN; ++ni) Mma(acc[mi][ni], a_lo[mi], b_hi[ni]);
#pragma unroll
      for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kMmaTilesN; ++ni) Mma(acc[mi][ni], a_hi[mi], b_lo[ni]);
#pragma unroll
      for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kMmaTilesN; ++ni) Mma(acc[mi][ni], a_hi[mi], b_hi[ni]);
    }

    if (++fold_count == kFoldTiles) {
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

  // Epilogue: y is NCHW, so for one channel consecutive pixels are consecutive floats; a warp's
  // store covers 8 pixels x 4 channels, four 32-byte segments.
  int y_row[kMmaTilesM][2];
#pragma unroll
  for (int mi = 0; mi < kMmaTilesM; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      int ml, nl;
      CFragCoord(warp_m0, warp_n0, mi, 0, lane, 2 * half, &ml, &nl);
      const int m = m0 + ml;
      y_row[mi][half] = m < p.m ? YRowBase(p, m) : -1;
    }
  ForEachMmaTile([&](int mi, int ni) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      int ml, nl;
      CFragCoord(warp_m0, warp_n0, mi, ni, lane, r, &ml, &nl);
      const int row = y_row[mi][r >> 1];
      const int n = n0 + nl;
      if (row >= 0 && n < p.cout) y[row + n * p.p] = __fadd_rn(sum[mi][ni][r], acc[mi][ni][r]);
    }
  });
}

class ImplicitGemm3xTf32Runner : public Runner {
 public:
  ImplicitGemm3xTf32Runner(const Params& p, int64_t tiles)
      : p_(p), tiles_(static_cast<unsigned>(tiles)) {}
  size_t workspace_bytes() const override { return 0; }

  absl::Status Run(const RunArgs& a) const override {
    const bool vec_a = CanVectorizeA(p_, reinterpret_cast<uintptr_t>(a.x));
    const bool vec_b = CanVectorizeB(p_, reinterpret_cast<uintptr_t>(a.w));
    const dim3 grid(tiles_), block(kThreads);
    if (vec_a && vec_b) {
      ImplicitGemm3xTf32Kernel<true, true><<<grid, block, 0, a.stream>>>(a.x, a.w, a.y, p_);
    } else if (vec_a) {
      ImplicitGemm3xTf32Kernel<true, false><<<grid, block, 0, a.stream>>>(a.x, a.w, a.y, p_);
    } else if (vec_b) {
      ImplicitGemm3xTf32Kernel<false, true><<<grid, block, 0, a.stream>>>(a.x, a.w, a.y, p_);
    } else {
      ImplicitGemm3xTf32Kernel<false, false><<<grid, block, 0, a.stream>>>(a.x, a.w, a.y, p_);
    }
    return LaunchStatus("implicit_gemm_3xtf32 kernel launch");
  }

 private:
  Params p_;
  unsigned tiles_;
};

// The proposal carries the kernel's parameters: there is no tile to choose.
class ImplicitGemm3xTf32 : public AlgorithmWithConfig<Params> {
 public:
  std::string name() const override { return "implicit_gemm_3xtf32"; }
  // Fitted by tools/fit_auto.py (docs/data/round45_fit_*.json).
  double calibration() const override { return 2.600; }
  absl::Status WithinContract(const Shape& shape) const override {
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The time: a roofline of three TF32 products per term on the padded tiles at ~300 TFLOP/s
  // (about 60% of the H200's dense TF32 peak, what mma.sync tends to reach), the minimal bytes
  // at 3 TB/s, 5 us of launch and tail; calibration() corrects it.
  absl::StatusOr<Params> Choose(const Shape& s, const DeviceInfo&,
                                double* seconds) const override {
    RETURN_IF_ERROR(CheckIndexing(s));
    const int64_t k = s.in_channels * s.kernel_h * s.kernel_w;
    if (k > kMaxReduction) {
      return absl::UnimplementedError(absl::StrCat(
          "implicit_gemm_3xtf32: reduction length Cin*Kh*Kw = ", k, " exceeds ", kMaxReduction,
          ", beyond which its blocked fp32 accumulation is not verified to meet the accuracy bar"));
    }
    const double padded_flops = 2.0 * static_cast<double>(NumTiles(s)) * kBM * kBN *
                                static_cast<double>((k + kBK - 1) / kBK * kBK);
    *seconds = 3.0 * padded_flops / 300e12 + s.min_bytes() / 3e12 + 5e-6;
    return MakeParams(s);
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Params& p,
                                                const DeviceInfo&) const override {
    return std::unique_ptr<Runner>(new ImplicitGemm3xTf32Runner(p, NumTiles(s)));
  }
};

}  // namespace
}  // namespace implicit_gemm_3xtf32_internal

std::unique_ptr<Algorithm> MakeImplicitGemm3xTf32() {
  return std::make_unique<implicit_gemm_3xtf32_internal::ImplicitGemm3xTf32>();
}

}  // namespace conv2d
