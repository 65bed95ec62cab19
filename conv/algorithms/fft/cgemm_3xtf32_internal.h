// cgemm_3xtf32 internals, plain C++ shared by the kernel and a CPU test that replays the kernel's
// index algebra lane by lane (tile choice, shared-memory layout, fragment maps).
//
// The complex product with conj(B) as one real GEMM. The kernel computes the transpose,
// C_f^T (n x m) = conj(B_f) (n x k) * A_f^T (k x m), because n (output channels: 64, 128) fills
// the MMA's 16-row dimension exactly, while m (tiles: 28, 49, 50, 100, ...) only needs the MMA's
// 8-column granularity (m = 50 computes 56 columns, not 64). One m16n8k8 step covers four complex
// k values l0..l0+3: MMA k index q < 4 holds the real parts of l0+q, q >= 4 the imaginary parts,
// so a lane's two k slots (t, t+4) are one complex number, one 8-byte shared-memory load:
//   MMA operand A (row j, k q) = (Br, Bi)[j, l0+t]           (from B, the filter spectrum)
//   MMA operand B for Cr       = (Ar, Ai)[i, l0+t]           sum: Br*Ar + Bi*Ai = Re(A conj B)
//   MMA operand B for Ci       = (Ai, -Ar)[i, l0+t]          sum: Br*Ai - Bi*Ar = Im(A conj B)
// Each real product is split (3xTF32, conv/arch/split_3xtf32.h): x = hi + lo, hi = x rounded to
// TF32, lo = x - hi handed to the tensor core unrounded, and a*b ~ lo_a*hi_b + hi_a*lo_b +
// hi_a*hi_b (small terms first), accumulated in fp32.
#ifndef CONV2D_CONV_CGEMM_3XTF32_INTERNAL_H_
#define CONV2D_CONV_CGEMM_3XTF32_INTERNAL_H_

#include <cstddef>
#include <cstdint>

#include "conv/algorithms/fft/fft_tiled_internal.h"  // GemmLayout, CONV2D_HOST_DEVICE
#include "conv/arch/split_3xtf32.h"

namespace conv2d {

// Which kernel CgemmConjBatched3xTf32 runs (cgemm_3xtf32.h): kAuto takes the wgmma kernel on
// sm_90 where cgemm_3xtf32_sm90::AutoTakesWgmma says it measured faster, mma.sync elsewhere.
enum class CgemmKernel { kAuto, kMmaSync, kWgmma };

namespace cgemm_3xtf32 {

constexpr int kBk = 16;     // complex k per pipeline stage (four MMA k-steps)
constexpr int kStages = 3;  // cp.async pipeline depth
constexpr int kWarpN = 32;  // a warp's tile: 32 rows of n (two m16 tiles)...
constexpr int kWarpM = 32;  // ...by 32 columns of m (four n8 tiles)
// Shared rows are padded by 4 complex: a fragment load reads rows l0+t (t < 4) at columns g
// (g < 8); with a row stride = 4 (mod 16) complex, each half-warp's 16 8-byte loads hit 16
// distinct bank pairs.
constexpr int kPad = 4;

// What both mix kernels (this one and cgemm_3xtf32_sm90) take by value: the layout's operands
// and extents, and their CTA tile grid. Cplx is float2 on the device.
template <class Cplx>
struct MixParams {
  const Cplx* a;
  const Cplx* b;
  Cplx* c;
  int m, n, k, lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  int tiles_m, tiles_n;
};
template <class Cplx>
MixParams<Cplx> MakeMixParams(const fft_tiled::GemmLayout& l, const void* a, const void* b,
                              void* c, int tiles_m, int tiles_n) {
  return {static_cast<const Cplx*>(a), static_cast<const Cplx*>(b), static_cast<Cplx*>(c),
          l.m, l.n, l.k, l.lda, l.ldb, l.ldc, l.stride_a, l.stride_b, l.stride_c, tiles_m, tiles_n};
}

struct Tile {
  int bn = 0, bm = 0;            // CTA tile: rows of n, columns of m
  int warps_n = 0, warps_m = 0;  // warps along n and m
  int threads = 0;
  int lds_b = 0, lds_a = 0;  // shared row strides in complex elements (one row per k)
  int stage_complex = 0;     // complex elements per pipeline stage (B part then A part)
  size_t smem_bytes = 0;
};

constexpr Tile MakeTile(int bn, int bm) {
  Tile t;
  t.bn = bn;
  t.bm = bm;
  t.warps_n = bn / kWarpN;
  t.warps_m = bm / kWarpM;
  t.threads = 32 * t.warps_n * t.warps_m;
  t.lds_b = bn + kPad;
  t.lds_a = bm + kPad;
  t.stage_complex = kBk * (t.lds_b + t.lds_a);
  t.smem_bytes = static_cast<size_t>(kStages) * t.stage_complex * 8;
  return t;
}

// The instantiated tiles. n > 64 takes the 128-row tile (one CTA reads each filter spectrum
// element once per m tile); m <= 32 the 32-column tile (no idle warps for m = 28).
inline Tile ChooseTile(const fft_tiled::GemmLayout& l) {
  return MakeTile(l.n > 64 ? 128 : 64, l.m > 32 ? 64 : 32);
}

struct Grid {
  int64_t tiles_m = 0, tiles_n = 0;
  int64_t blocks = 0;  // batch * tiles_n * tiles_m; m tiles fastest (they share B_f in L2)
};
inline Grid MakeGrid(const fft_tiled::GemmLayout& l, const Tile& t) {
  Grid g;
  g.tiles_m = (l.m + t.bm - 1) / t.bm;
  g.tiles_n = (l.n + t.bn - 1) / t.bn;
  g.blocks = g.tiles_m * g.tiles_n * l.batch;
  return g;
}

// Block b computes m tile b % tiles_m, n tile (b / tiles_m) % tiles_n, of frequency
// b / (tiles_m * tiles_n).
struct BlockCoords {
  int tm, tn;
  int64_t f;
};
CONV2D_HOST_DEVICE inline BlockCoords BlockCoordsOf(int64_t block, int tiles_m, int tiles_n) {
  const int64_t rest = block / tiles_m;
  return {static_cast<int>(block % tiles_m), static_cast<int>(rest % tiles_n), rest / tiles_n};
}

// How many of a warp's `count` MMA tiles of `size` rows (columns), starting at `first`, hold
// any of the `extent` valid rows (columns): 0 (an idle warp) to count.
CONV2D_HOST_DEVICE inline int ActiveTiles(int extent, int first, int size, int count) {
  const int left = extent - first;
  if (left <= 0) return 0;
  const int tiles = (left + size - 1) / size;
  return tiles < count ? tiles : count;
}

// Which element of a stage thread `tid` copies in its r-th copy of the B part (e < bn*kBk) or
// the A part: row (n or m index within the tile) and k (within the stage). Consecutive threads
// take consecutive rows: coalesced global reads and conflict-free shared writes.
struct CopySlot {
  int row, kk;
};
CONV2D_HOST_DEVICE inline CopySlot CopySlotOf(int e, int rows) { return {e % rows, e / rows}; }

// Fragment maps of mma.m16n8k8 .tf32 (PTX ISA; lane = 4*g + t):
//   A (16x8, row-major): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
//   B (8x8, k x n):      b0 (k t, n g), b1 (k t+4, n g)
//   C (16x8):            c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
CONV2D_HOST_DEVICE inline int LaneGroup(int lane) { return lane >> 2; }
CONV2D_HOST_DEVICE inline int LaneInGroup(int lane) { return lane & 3; }
CONV2D_HOST_DEVICE inline int AccRow(int lane, int v) { return LaneGroup(lane) + 8 * (v >> 1); }
CONV2D_HOST_DEVICE inline int AccCol(int lane, int v) { return 2 * LaneInGroup(lane) + (v & 1); }

}  // namespace cgemm_3xtf32
}  // namespace conv2d

#endif  // CONV2D_CONV_CGEMM_3XTF32_INTERNAL_H_
