// Split-precision (3xTF32) batched CGEMM C_f = A_f * B_f^H on mma.sync m16n8k8 (layout algebra
// and the reasons behind it: cgemm_3xtf32_internal.h). On sm_90 the entry point hands the mixes
// with more than 64 output channels to the wgmma kernel of cgemm_3xtf32_sm90.cu (faster there).
//
// One CTA computes a bn x bm tile of C_f^T (n rows, m columns) for one frequency f; warps own
// 32 x 32 sub-tiles (two m16 by four n8 MMA tiles, real and imaginary accumulators: 64 floats).
// k is streamed through shared memory in stages of 16 complex values with 8-byte cp.async (any
// m, lda and alignment works: the input spectra have odd leading dimensions such as 49), three
// stages in flight, zero-filled past m, n and k. Operands are split into TF32 hi/lo in registers
// after each shared load: six MMAs per 16x8 complex tile per four complex k. The tensor cores sum
// each stage into fresh partials, which fp32 adds then fold into the running sums
// (ComputeStage says why).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/fft/cgemm_3xtf32.h"
#include "conv/algorithms/fft/cgemm_3xtf32_internal.h"
#include "conv/algorithms/fft/cgemm_3xtf32_sm90.h"
#include "conv/algorithms/fft/cgemm_3xtf32_sm90_internal.h"
#include "conv/arch/cp_async.cuh"
#include "conv/core/cuda_status.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace cgemm_3xtf32 {
namespace {

struct Params : MixParams<float2> {};

// The compile-time view of MakeTile(BN, BM) (checked equal below).
template <int BN, int BM>
struct Cfg {
  static constexpr int kWarpsN = BN / kWarpN;
  static constexpr int kWarpsM = BM / kWarpM;
  static constexpr int kThreads = 32 * kWarpsN * kWarpsM;
  static constexpr int kLdsB = BN + kPad;
  static constexpr int kLdsA = BM + kPad;
  static constexpr int kStage = kBk * (kLdsB + kLdsA);
  static constexpr int kCopiesB = BN * kBk / kThreads;
  static constexpr int kCopiesA = BM * kBk / kThreads;
  // The running sums and the stage's partials take 128 registers: the compiler gets all 255
  // (one 256-thread CTA per SM; capped at 128 it spilled hundreds of bytes).
  static constexpr int kMinBlocks = 1;
  static_assert(BN % kWarpN == 0 && BM % kWarpM == 0, "tile");
  static_assert(kLdsB % 16 == kPad && kLdsA % 16 == kPad, "bank-conflict-free padding");
  static_assert(kCopiesB * kThreads == BN * kBk && kCopiesA * kThreads == BM * kBk, "copies");
  static_assert(kThreads % BN == 0 && kThreads % BM == 0, "a thread copies one fixed row");
};


// d += a * b on one 16x8x8 TF32 tile.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One pipeline stage (kBk complex k) of one warp's 32 x 32 tile. sb/sa point at the warp's first
// row/column in the stage's B/A parts. kFull: every MMA tile of the warp is inside n and m;
// otherwise tiles past n_act (m16 tiles) or m_act (n8 tiles) are skipped (warp-uniform).
//
// The tensor cores sum the stage (32 real products per output) into fresh partials, which are
// then added into the running sums on the FP32 pipe. Fed the running sums directly, the split
// product was 3.5x less accurate than cuBLAS's fp32 CGEMM and failed the bar on K = 32 through
// the FFT; this way it is 2.3x more accurate (PERF.md, round 9). Why: the tensor cores' fp32
// accumulation truncates (as published for earlier NVIDIA tensor cores), up to one ulp of the
// sum per MMA and always toward zero, which adds up over a long sum of one sign but stays small
// and unbiased on short partials of random sign. Folding after every MMA k-step was 1.3x more
// accurate again, but one tile at a time (fewer registers) it was up to 1.5x slower on the small
// mixes, and with all 16 partials live (fold every 2 k-steps) 1.4x slower on the large ones.
template <bool kFull, int kLdsB, int kLdsA>
__device__ __forceinline__ void ComputeStage(const float2* __restrict__ sb,
                                             const float2* __restrict__ sa, int g, int t,
                                             int n_act, int m_act, float (&re)[2][4][4],
                                             float (&im)[2][4][4]) {
  float pr[2][4][4], pi[2][4][4];
#pragma unroll
  for (int wn = 0; wn < 2; ++wn) {
#pragma unroll
    for (int wm = 0; wm < 4; ++wm) {
#pragma unroll
      for (int v = 0; v < 4; ++v) pr[wn][wm][v] = pi[wn][wm][v] = 0.0f;
    }
  }
#pragma unroll
  for (int ks = 0; ks < kBk / 4; ++ks) {
    // This lane's k slots (t, t+4) are complex l = 4*ks + t: real and imaginary part.
    const float2* rb = sb + (4 * ks + t) * kLdsB + g;
    const float2* ra = sa + (4 * ks + t) * kLdsA + g;
    // The finite-only split (split_3xtf32.h): the spectra are finite, fft_fused having taken
    // the non-finite inputs out of the transforms, and it is one instruction shorter.
    uint32_t ahi[2][4], alo[2][4];
#pragma unroll
    for (int wn = 0; wn < 2; ++wn) {
      const float2 v0 = rb[16 * wn];      // row g
      const float2 v1 = rb[16 * wn + 8];  // row g + 8
      SplitTf32Finite(v0.x, ahi[wn][0], alo[wn][0]);
      SplitTf32Finite(v1.x, ahi[wn][1], alo[wn][1]);
      SplitTf32Finite(v0.y, ahi[wn][2], alo[wn][2]);
      SplitTf32Finite(v1.y, ahi[wn][3], alo[wn][3]);
    }
    // (Ar, Ai): {Ar, Ai} feeds the real accumulator, {Ai, -Ar} the imaginary one.
    uint32_t bhi[4][2], blo[4][2];
#pragma unroll
    for (int wm = 0; wm < 4; ++wm) {
      const float2 u = ra[8 * wm];  // column g
      SplitTf32Finite(u.x, bhi[wm][0], blo[wm][0]);
      SplitTf32Finite(u.y, bhi[wm][1], blo[wm][1]);
    }
    // Small terms first (lo*hi, hi*lo), then hi*hi; each pass over all 16 partials keeps the
    // dependent MMAs of one partial 16 issues apart.
#pragma unroll
    for (int pass = 0; pass < 3; ++pass) {
#pragma unroll
      for (int wn = 0; wn < 2; ++wn) {
#pragma unroll
        for (int wm = 0; wm < 4; ++wm) {
          if (kFull || (wn < n_act && wm < m_act)) {
            const uint32_t(&a)[4] = pass == 0 ? alo[wn] : ahi[wn];
            const uint32_t(&b)[2] = pass == 1 ? blo[wm] : bhi[wm];
            Mma(pr[wn][wm], a, b[0], b[1]);
            Mma(pi[wn][wm], a, b[1], b[0] ^ 0x80000000u);  // exact negation of the split
          }
        }
      }
    }
  }
#pragma unroll
  for (int wn = 0; wn < 2; ++wn) {
#pragma unroll
    for (int wm = 0; wm < 4; ++wm) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        re[wn][wm][v] += pr[wn][wm][v];
        im[wn][wm][v] += pi[wn][wm][v];
      }
    }
  }
}

template <int BN, int BM>
__global__ void __launch_bounds__(Cfg<BN, BM>::kThreads, Cfg<BN, BM>::kMinBlocks)
    CgemmConjKernel(const Params p) {
  using C = Cfg<BN, BM>;
  extern __shared__ float2 smem[];
  PdlLaunchDependents();
  PdlWait();  // the spectra come from the kernels before this one
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int warp_n = warp % C::kWarpsN, warp_m = warp / C::kWarpsN;
  const int g = LaneGroup(lane), t = LaneInGroup(lane);

  // m tiles vary fastest: the CTAs sharing B_f run together and hit L2.
  const BlockCoords bc = BlockCoordsOf(blockIdx.x, p.tiles_m, p.tiles_n);
  const int m0 = bc.tm * BM, n0 = bc.tn * BN;
  const int64_t f = bc.f;
  const float2* __restrict__ A = p.a + f * p.stride_a;
  const float2* __restrict__ B = p.b + f * p.stride_b;
  float2* __restrict__ Cm = p.c + f * p.stride_c;

  // Thread tid copies row tid % rows of the B (A) part for k rows kk0, kk0 + kStep, ... of each
  // stage (CopySlotOf with e = tid + r * kThreads, as the threads are a multiple of the rows).
  // The source pointer advances by additions only: offsets kept per copy would cost registers.
  const CopySlot slot_b = CopySlotOf(tid, BN), slot_a = CopySlotOf(tid, BM);
  const bool row_b_valid = n0 + slot_b.row < p.n, row_a_valid = m0 + slot_a.row < p.m;
  const float2* src_b = B + (row_b_valid ? n0 + slot_b.row : 0);
  const float2* src_a = A + (row_a_valid ? m0 + slot_a.row : 0);
  const int64_t step_b = static_cast<int64_t>(C::kThreads / BN) * p.ldb;
  const int64_t step_a = static_cast<int64_t>(C::kThreads / BM) * p.lda;
  auto load = [&](int chunk, int stage) {
    float2* sb = smem + stage * C::kStage + slot_b.kk * C::kLdsB + slot_b.row;
    float2* sa = smem + stage * C::kStage + kBk * C::kLdsB + slot_a.kk * C::kLdsA + slot_a.row;
    int l = chunk * kBk + slot_b.kk;
    const float2* q = src_b + static_cast<int64_t>(l) * p.ldb;
#pragma unroll
    for (int r = 0; r < C::kCopiesB; ++r) {
      const bool valid = row_b_valid && l < p.k;
      CpAsync<8>(sb + r * (C::kThreads / BN) * C::kLdsB, valid ? q : B, valid);
      l += C::kThreads / BN;
      q += step_b;
    }
    l = chunk * kBk + slot_a.kk;
    q = src_a + static_cast<int64_t>(l) * p.lda;
#pragma unroll
    for (int r = 0; r < C::kCopiesA; ++r) {
      const bool valid = row_a_valid && l < p.k;
      CpAsync<8>(sa + r * (C::kThreads / BM) * C::kLdsA, valid ? q : A, valid);
      l += C::kThreads / BM;
      q += step_a;
    }
  };

  const int wn0 = n0 + warp_n * kWarpN, wm0 = m0 + warp_m * kWarpM;
  const int n_act = ActiveTiles(p.n, wn0, 16, kWarpN / 16);
  const int m_act = ActiveTiles(p.m, wm0, 8, kWarpM / 8);
  const bool full = n_act == 2 && m_act == 4;
  const bool idle = n_act == 0 || m_act == 0;

  float re[2][4][4], im[2][4][4];
#pragma unroll
  for (int wn = 0; wn < 2; ++wn) {
#pragma unroll
    for (int wm = 0; wm < 4; ++wm) {
#pragma unroll
      for (int v = 0; v < 4; ++v) re[wn][wm][v] = im[wn][wm][v] = 0.0f;
    }
  }

  const int chunks = (p.k + kBk - 1) / kBk;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load(s, s);
    CpAsyncCommit();  // empty groups keep the group count uniform
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of `chunk` have landed...
    __syncthreads();  // ...everyone's have, and every warp is done with chunk - 1's stage
    const int next = chunk + kStages - 1;
    if (next < chunks) load(next, next % kStages);
    CpAsyncCommit();
    const float2* sb = smem + (chunk % kStages) * C::kStage;
    const float2* sa = sb + kBk * C::kLdsB;
    sb += warp_n * kWarpN;
    sa += warp_m * kWarpM;
    if (full) {
      ComputeStage<true, C::kLdsB, C::kLdsA>(sb, sa, g, t, n_act, m_act, re, im);
    } else if (!idle) {
      ComputeStage<false, C::kLdsB, C::kLdsA>(sb, sa, g, t, n_act, m_act, re, im);
    }
  }
  CpAsyncWait<0>();  // no copy may outlive the CTA's shared memory

  // Accumulator v of MMA tile (wn, wm) is C^T[row, col], i.e. C[i = col, j = row]; a lane's
  // v = 0,1 (and 2,3) are adjacent i: one 16-byte store where aligned.
#pragma unroll
  for (int wn = 0; wn < 2; ++wn) {
#pragma unroll
    for (int wm = 0; wm < 4; ++wm) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int j = wn0 + 16 * wn + AccRow(lane, 2 * h);
        const int i = wm0 + 8 * wm + AccCol(lane, 2 * h);
        if (j >= p.n || i >= p.m) continue;
        float2* dst = Cm + static_cast<int64_t>(j) * p.ldc + i;
        const float2 v0 = make_float2(re[wn][wm][2 * h], im[wn][wm][2 * h]);
        const float2 v1 = make_float2(re[wn][wm][2 * h + 1], im[wn][wm][2 * h + 1]);
        if (i + 1 < p.m) {
          if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
            *reinterpret_cast<float4*>(dst) = make_float4(v0.x, v0.y, v1.x, v1.y);
          } else {
            dst[0] = v0;
            dst[1] = v1;
          }
        } else {
          dst[0] = v0;
        }
      }
    }
  }
}

template <int BN, int BM>
absl::Status Launch(const Params& p, int64_t blocks, cudaStream_t stream) {
  using C = Cfg<BN, BM>;
  constexpr Tile kTile = MakeTile(BN, BM);
  static_assert(kTile.threads == C::kThreads && kTile.lds_b == C::kLdsB &&
                    kTile.lds_a == C::kLdsA && kTile.stage_complex == C::kStage,
                "Cfg and MakeTile disagree");
  auto* kernel = &CgemmConjKernel<BN, BM>;
  RETURN_IF_ERROR(CudaStatus(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kTile.smem_bytes)),
      "cgemm_3xtf32: cudaFuncSetAttribute"));
  return CudaStatus(LaunchPdl(/*pdl=*/true, kernel, static_cast<unsigned>(blocks), C::kThreads,
                             kTile.smem_bytes, stream, p),
                    "cgemm_3xtf32 kernel");
}

}  // namespace
}  // namespace cgemm_3xtf32

absl::Status CgemmConjBatched3xTf32(const fft_tiled::GemmLayout& l, const void* a, const void* b,
                                    void* c, cudaStream_t stream, CgemmKernel kernel) {
  using namespace cgemm_3xtf32;  // NOLINT: the file's own internals
  if (l.m < 1 || l.n < 1 || l.k < 1 || l.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cgemm_3xtf32: m, n, k, batch must be >= 1, got ",
                                                   l.m, ", ", l.n, ", ", l.k, ", ", l.batch));
  }
  if (l.lda < l.m || l.ldb < l.n || l.ldc < l.m) {
    return absl::InvalidArgumentError(
        absl::StrCat("cgemm_3xtf32: leading dimensions lda ", l.lda, ", ldb ", l.ldb, ", ldc ",
                     l.ldc, " too small for m ", l.m, ", n ", l.n));
  }
  if (l.stride_a < 0 || l.stride_b < 0 || l.stride_c < 0) {
    return absl::InvalidArgumentError("cgemm_3xtf32: negative batch stride");
  }
  for (const void* p : {a, b, static_cast<const void*>(c)}) {
    if (p == nullptr || reinterpret_cast<uintptr_t>(p) % 8 != 0) {
      return absl::InvalidArgumentError(
          "cgemm_3xtf32: a, b and c must be non-null and 8-byte aligned");
    }
  }
  if (kernel == CgemmKernel::kWgmma && !CgemmSm90Supported()) {
    return absl::FailedPreconditionError(
        "cgemm_3xtf32: the wgmma kernel needs a compute capability 9.0 device");
  }
  const bool wgmma = kernel == CgemmKernel::kWgmma ||
                     (kernel == CgemmKernel::kAuto && CgemmSm90Supported() &&
                      cgemm_3xtf32_sm90::AutoTakesWgmma(l));
  if (wgmma) return CgemmConjBatched3xTf32Sm90(l, a, b, c, stream);
  const Tile tile = ChooseTile(l);
  const Grid grid = MakeGrid(l, tile);
  if (grid.blocks > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cgemm_3xtf32: ", grid.blocks, " thread blocks exceed the grid limit"));
  }
  const Params p{MakeMixParams<float2>(l, a, b, c, static_cast<int>(grid.tiles_m),
                                       static_cast<int>(grid.tiles_n))};
  if (tile.bn == 128) {
    return tile.bm == 64 ? Launch<128, 64>(p, grid.blocks, stream)
                         : Launch<128, 32>(p, grid.blocks, stream);
  }
  return tile.bm == 64 ? Launch<64, 64>(p, grid.blocks, stream)
                       : Launch<64, 32>(p, grid.blocks, stream);
}

}  // namespace conv2d
