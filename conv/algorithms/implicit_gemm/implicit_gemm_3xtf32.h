// "implicit_gemm_3xtf32": the convolution as an implicit GEMM on the tensor cores, in split
// precision so that it meets the fp32 accuracy bar that plain TF32 misses by 20-470x. The GEMM
// view (M = output pixels, N = output channels, K = Cin*Kh*Kw, A gathered from x on the fly):
// implicit_gemm_view.h.
//
// Each fp32 operand v is split as v = hi + lo, hi = v rounded to TF32, lo = v - hi handed to the
// tensor core as it is (conv/arch/split_3xtf32.h, which also says why and what it costs), and a*b
// is taken as a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (three mma.sync m16n8k8 TF32 products; a_lo*b_lo,
// at most 2^-22 of a*b, is dropped). Long reductions are accumulated in blocks: the mma
// accumulators hold 128 terms at most, then are folded into a second set of fp32 registers; the
// error argument is at the top of implicit_gemm_3xtf32.cu.
//
// This header is plain C++ (no CUDA types): the index arithmetic that the kernel uses is here,
// as functions that compile both for the device and the host, so that a CPU test can replay the
// kernel's data movement (which thread copies which element where, which shared-memory word each
// mma fragment register reads, where each accumulator is written) against the fp64 reference.
#ifndef CONV2D_CONV_IMPLICIT_GEMM_3XTF32_H_
#define CONV2D_CONV_IMPLICIT_GEMM_3XTF32_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_view.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/host_device.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeImplicitGemm3xTf32();

// Internals exposed so that the index arithmetic can be tested on a machine without a GPU.
// Not part of the library's API.
namespace implicit_gemm_3xtf32_internal {

using implicit_gemm_view::CanVectorizeA;
using implicit_gemm_view::PixelBase;
using implicit_gemm_view::YRowBase;

// The block tile: kBM output pixels x kBN output channels, kBK reduction terms per pipeline
// stage, kStages stages of cp.async in flight. 8 warps as 4 (M) x 2 (N), each a 32x32 warp tile
// of 2 x 4 mma.m16n8k8 tiles.
constexpr int kBM = 128;
constexpr int kBN = 64;
constexpr int kBK = 16;
constexpr int kStages = 3;
constexpr int kThreads = 256;
constexpr int kWarpsM = 4;
constexpr int kWarpsN = 2;
constexpr int kWarpM = kBM / kWarpsM;  // 32
constexpr int kWarpN = kBN / kWarpsN;  // 32
constexpr int kMmaTilesM = kWarpM / 16;  // 2
constexpr int kMmaTilesN = kWarpN / 8;   // 4
// The mma accumulators are folded every kFoldTiles k-tiles (kFoldTiles * kBK = 128 terms).
constexpr int kFoldTiles = 8;

// Shared memory, per stage: A as [kBK][kAStride] (k-major rows of pixels, as gathered), B as
// [kBN][kBStride] (rows of K, as w is stored). The padding makes every fragment load hit 32
// distinct banks: an A fragment register is read at (k0+tig)*kAStride + m0+gid over the lanes
// (gid = lane/4, tig = lane%4), so kAStride = 8 (mod 32) spreads tig over bank groups of 8; a B
// register at (n0+gid)*kBStride + k0+tig, so kBStride = 20 puts gid*20 (mod 32) on distinct
// multiples of 4. Both strides keep rows 16-byte aligned for 16-byte cp.async.
constexpr int kAStride = kBM + 8;  // 136
constexpr int kBStride = kBK + 4;  // 20
constexpr int kAStageFloats = kBK * kAStride;
constexpr int kBStageFloats = kBN * kBStride;
constexpr int kStageFloats = kAStageFloats + kBStageFloats;
constexpr int kSmemBytes = kStages * kStageFloats * 4;  // 41472: static, under the 48 KiB default

static_assert(kThreads == 32 * kWarpsM * kWarpsN, "one warp per warp tile");
static_assert(kAStride % 32 == 8 && kBStride % 32 == 20, "bank-conflict-free fragment loads");
static_assert(kAStride % 4 == 0 && kBStride % 4 == 0 && kAStageFloats % 4 == 0,
              "16-byte cp.async destinations");
static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");

// Everything the kernel needs to know about the shape, in 32-bit integers (CanImplement has
// checked that they fit, with the margins the kernel's out-of-range indices need).
struct Params {
  int cin = 0, cout = 0, h = 0, w = 0, kh = 0, kw = 0;
  int ow = 0;        // out_w
  int hw = 0;        // h*w: one input channel plane
  int cin_hw = 0;    // cin*h*w: one input image
  int p = 0;         // out_h*out_w: one output channel plane
  int m = 0;         // GEMM_M = batch*p
  int k = 0;         // GEMM_K = cin*kh*kw
  int k_tiles = 0;   // ceil(k / kBK)
  int n_tiles = 0;   // ceil(cout / kBN)
  FastDiv div_p, div_ow, div_khkw, div_kw;  // conv/arch/fast_div.h: every index is below 2^31
  // The geometry (implicit_gemm_view.h), after the fields above so that the basic kernels'
  // parameter offsets stay as they were.
  int sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, dh_w = 0;
  bool geometry = false;
  // The backward's (implicit_gemm_3xtf32_backward.h), after the forward's fields for the same
  // reason. m, k, k_tiles and n_tiles above are then the backward GEMM's.
  int og = 0, cg = 0;       // output and input channels per group
  int oh = 0;               // out_h
  int red = 0;              // one filter's length, cg*kh*kw (the forward's K)
  int cout_p = 0;           // cout*out_h*out_w: one dy image
  int n_group = 0;          // GEMM N of one group
  int n_tiles_group = 0;    // N tiles per group; the N tiles are numbered group by group
  int slices = 1;           // wgrad: split-K slices (blockIdx.y)
  int slice_tiles = 0;      // wgrad: k-tiles per slice
  int fold_tiles = kFoldTiles;  // wgrad: k-tiles per accumulator chunk (WgradFoldTiles)
  bool center = false;      // wgrad: x centred (WgradCenters)
  // wgrad with center: ChannelSums's runs per channel of dy, and (set per call, in the
  // workspace) x's channel centres (WgradCenter) and dy's channel sums.
  int dy_runs = 1;
  const float* centers = nullptr;
  const double* dy_sums = nullptr;
  int slice_stride = 0;     // wgrad: floats between two slices' partial dw (Cout*red)
  FastDiv div_hw, div_w, div_sh, div_sw, div_n_tiles_group;
};

// The GEMM of each operation, per group (implicit_gemm_3xtf32_backward.h says why these):
//   fprop  M = batch*out_h*out_w  N = Cout/groups          K = (Cin/groups)*Kh*Kw
//   dgrad  M = batch*H*W          N = Cin/groups           K = (Cout/groups)*Kh*Kw
//   wgrad  M = (Cin/groups)*Kh*Kw N = Cout/groups          K = batch*out_h*out_w
struct GemmDims {
  int64_t m = 0, n = 0, k = 0;
};
GemmDims DimsOf(const Shape& shape);

// The reasons (if any) that `shape` cannot be run with this kernel's 32-bit indices.
absl::Status CheckIndexing(const Shape& shape);
// Requires CheckIndexing(shape).ok().
Params MakeParams(const Shape& shape);
// The grid: one block per (M tile, N tile) (times wgrad's slices, in blockIdx.y); N tiles vary
// fastest so that the blocks that gather the same input patch run together and share it
// through L2.
int64_t NumTiles(const Shape& shape);

// Whether the 16-byte gathers apply: for A, CanVectorizeA (implicit_gemm_view.h); for B,
// K % 4 = 0 and w 16-byte aligned.
CONV2D_HOST_DEVICE_INLINE bool CanVectorizeB(const Params& p, uintptr_t w) {
  return p.k % 4 == 0 && w % 16 == 0;
}

// The im2col gather of one thread. Offsets are separable: x offset of A[m][k] is
// mbase(m) + kofs(k), mbase = PixelBase(m), kofs = c*h*w + p*w + q.
//
// Scalar form: thread t owns pixel column t % kBM and k rows (t / kBM)*8 .. +7 of the stage;
// consecutive threads take consecutive pixels, so a warp's 4-byte copies are coalesced, and the
// thread's 8 k values are consecutive, so one division gives the first (c, p, q) and the rest
// step incrementally.
// Vector form: thread t owns pixels 4*(t % 32) .. +3 and k rows t / 32 and t / 32 + 8.
template <bool kVec>
struct AGather {
  static constexpr int kRows = kVec ? 2 : kBK * kBM / kThreads;  // copies per thread per stage
  static constexpr int kRowStep = kVec ? kThreads / 32 : 1;
  int col = 0;   // pixel column in the tile
  int row0 = 0;  // first k row in the stage
  int mbase = 0;
  bool m_valid = false;

  CONV2D_HOST_DEVICE_INLINE void Init(const Params& p, int m0, int tid) {
    if (kVec) {
      col = 4 * (tid % 32);
      row0 = tid / 32;
    } else {
      col = tid % kBM;
      row0 = (tid / kBM) * kRows;
    }
    const int m = m0 + col;
    // In the vector form M % 4 = 0 and m % 4 = 0, so m < M covers all four pixels.
    m_valid = m < p.m;
    if (m_valid) mbase = PixelBase(p, m);
  }

  // Calls f(shared-memory index within the A stage, x offset, valid) for this thread's copies of
  // k-tile kt. Invalid copies (pixel past M or k past K) must zero-fill; their offset is 0.
  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEach(const Params& p, int kt, F&& f) const {
    if (kVec) {
CONV2D_UNROLL
      for (int i = 0; i < kRows; ++i) {
        const int row = row0 + i * kRowStep;
        const int kg = kt * kBK + row;
        const int c = p.div_khkw.Div(kg);
        const int r = kg - c * (p.kh * p.kw);  // kw = 1: r is the kernel row
        const bool valid = m_valid && kg < p.k;
        f(row * kAStride + col, valid ? mbase + c * p.hw + r * p.w : 0, valid);
      }
    } else {
      const int kg = kt * kBK + row0;
      const int c = p.div_khkw.Div(kg);
      const int r = kg - c * (p.kh * p.kw);
      int kp = p.div_kw.Div(r);
      int kq = r - kp * p.kw;
      int kofs = c * p.hw + kp * p.w + kq;
CONV2D_UNROLL
      for (int i = 0; i < kRows; ++i) {
        const bool valid = m_valid && kg + i < p.k;
        f((row0 + i) * kAStride + col, valid ? mbase + kofs : 0, valid);
        // Next k: q+1, wrapping to the next kernel row, then to the next channel.
        ++kq;
        ++kofs;
        if (kq == p.kw) {
          kq = 0;
          ++kp;
          kofs += p.w - p.kw;
          if (kp == p.kh) {
            kp = 0;
            kofs += p.hw - p.kh * p.w;
          }
        }
      }
    }
  }
};

// The filter gather of one thread: B stage [kBN][kBStride] holds w[n0 + row][k0 .. k0+15].
// Scalar form: thread t copies k column t % 16 of rows t/16 + 16*i (a warp reads two 64-byte
// row segments per copy). Vector form: thread t copies 4 floats, row t / 4, columns 4*(t % 4).
template <bool kVec>
struct BGather {
  static constexpr int kCopies = kVec ? 1 : kBK * kBN / kThreads;  // 1 or 4
  int kcol = 0;
  int row0 = 0;
  int n0 = 0;

  CONV2D_HOST_DEVICE_INLINE void Init(const Params&, int n_tile_start, int tid) {
    n0 = n_tile_start;
    if (kVec) {
      kcol = 4 * (tid % 4);
      row0 = tid / 4;
    } else {
      kcol = tid % kBK;
      row0 = tid / kBK;
    }
  }

  // Calls f(shared-memory index within the B stage, w offset, valid) for this thread's copies
  // of k-tile kt. In the vector form K % 4 = 0, so k < K covers all four floats.
  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEach(const Params& p, int kt, F&& f) const {
    const int k = kt * kBK + kcol;
CONV2D_UNROLL
    for (int i = 0; i < kCopies; ++i) {
      const int row = row0 + i * (kThreads / kBK);
      const int n = n0 + row;
      const bool valid = n < p.cout && k < p.k;
      f(row * kBStride + kcol, valid ? n * p.k + k : 0, valid);
    }
  }
};

// What the one mainloop (implicit_gemm_3xtf32.cu's kernel) asks of an operation, as CUTLASS's
// kernels ask of their Operator: Init for the block's tile (and slice); ForEachA / ForEachB, the
// copies of one k-tile into the A stage ([kBK][kAStride], k-major) and the B stage
// ([kBN][kBStride], n-major) as f(stage index, source offset, valid), kACopy / kBCopy floats
// each; KBegin / KEnd, the block's k-tiles; and the epilogue's map, C[m][n0 + n] stored at
// RowBase(m) + (n0 + n)*ColStride for n0 + n < NLimit (RowBase -1 past M).
// The forward: A from x (AGather), B from w (BGather), C into y.
template <bool kVecA, bool kVecB>
struct FpropOp {
  static constexpr int kACopy = kVecA ? 4 : 1;
  static constexpr int kBCopy = kVecB ? 4 : 1;
  static constexpr int kFold = kFoldTiles;  // k-tiles per accumulator chunk
  AGather<kVecA> a;
  BGather<kVecB> b;
  int m0 = 0, n0 = 0;

  CONV2D_HOST_DEVICE_INLINE void Init(const Params& p, int m_tile, int n_tile, int, int tid) {
    m0 = m_tile * kBM;
    n0 = n_tile * kBN;
    a.Init(p, m0, tid);
    b.Init(p, n0, tid);
  }
  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEachA(const Params& p, int kt, F&& f) const {
    a.ForEach(p, kt, f);
  }
  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEachB(const Params& p, int kt, F&& f) const {
    b.ForEach(p, kt, f);
  }
  CONV2D_HOST_DEVICE_INLINE int KBegin(const Params&) const { return 0; }
  CONV2D_HOST_DEVICE_INLINE int KEnd(const Params& p) const { return p.k_tiles; }
  CONV2D_HOST_DEVICE_INLINE int RowBase(const Params& p, int m) const {
    return m < p.m ? YRowBase(p, m) : -1;
  }
  CONV2D_HOST_DEVICE_INLINE int ColStride(const Params& p) const { return p.p; }
  // The A element the mma takes (WgradOp centres it).
  CONV2D_HOST_DEVICE_INLINE float A(float v, int, int) const { return v; }
  CONV2D_HOST_DEVICE_INLINE int NLimit(const Params& p) const { return p.cout; }
};

// The mma.m16n8k8 TF32 fragment maps (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32), for
// lane = 4*gid + tig:
//   A (16x8, row-major): a0 (gid, tig), a1 (gid+8, tig), a2 (gid, tig+4), a3 (gid+8, tig+4)
//   B (8x8, "col"):      b0 (k=tig, n=gid), b1 (k=tig+4, n=gid)
//   C (16x8):            c0 (gid, 2tig), c1 (gid, 2tig+1), c2 (gid+8, 2tig), c3 (gid+8, 2tig+1)
// warp_m0/warp_n0: the warp tile's origin in the block tile; mi/ni: the mma tile in the warp
// tile; kk: the k8 step (0 or 8) in the stage; reg: the fragment register.
CONV2D_HOST_DEVICE_INLINE int AFragIndex(int warp_m0, int mi, int kk, int lane, int reg) {
  const int gid = lane >> 2, tig = lane & 3;
  const int m = warp_m0 + mi * 16 + gid + ((reg & 1) ? 8 : 0);
  const int k = kk + tig + ((reg & 2) ? 4 : 0);
  return k * kAStride + m;
}
CONV2D_HOST_DEVICE_INLINE int BFragIndex(int warp_n0, int ni, int kk, int lane, int reg) {
  const int gid = lane >> 2, tig = lane & 3;
  const int n = warp_n0 + ni * 8 + gid;
  const int k = kk + tig + (reg ? 4 : 0);
  return n * kBStride + k;
}
// The block-tile coordinates (m, n) of accumulator register `reg` of mma tile (mi, ni).
CONV2D_HOST_DEVICE_INLINE void CFragCoord(int warp_m0, int warp_n0, int mi, int ni, int lane,
                                          int reg, int* m, int* n) {
  const int gid = lane >> 2, tig = lane & 3;
  *m = warp_m0 + mi * 16 + gid + ((reg & 2) ? 8 : 0);
  *n = warp_n0 + ni * 8 + 2 * tig + (reg & 1);
}
CONV2D_HOST_DEVICE_INLINE int WarpM0(int warp) { return (warp % kWarpsM) * kWarpM; }
CONV2D_HOST_DEVICE_INLINE int WarpN0(int warp) { return (warp / kWarpsM) * kWarpN; }

}  // namespace implicit_gemm_3xtf32_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_IMPLICIT_GEMM_3XTF32_H_
