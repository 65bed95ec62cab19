// implicit_gemm_3xtf32's backward: the data gradient (dgrad) and the weight gradient (wgrad) as
// operations of the forward's mainloop (implicit_gemm_3xtf32.h's FpropOp says what an operation
// supplies: the A and B gathers, the k-tile range and the epilogue's map). Plain C++ for the
// device and the CPU replay, as the forward's gathers.
//
// dgrad (A = dy, B = w, C = dx), one GEMM per group g:
//   M = batch*H*W (dx pixels), N = Cin/groups, K = (Cout/groups)*Kh*Kw,
//   A[(b,h,v)][(o,p,q)] = dy[b, g*og + o, i, j] with i = (h + pt - p*dh) / sh, j likewise,
//                         where the division is exact and (i, j) is an output pixel, else 0;
//   B[(o,p,q)][c]       = w[g*og + o, c, p, q].
//   The gather masks the taps that miss a stride phase instead of walking one phase at a time
//   (CUTLASS's strided dgrad): at stride sh x sw a fraction 1 - 1/(sh*sw) of the products (3/4 at
//   stride 2) multiplies a zero. Correctness first; the phase decomposition is the next step.
//
// wgrad (A = x, B = dy, C = dw), one GEMM per group, transposed against the usual view
// (M = Cout) so that the larger side, (Cin/groups)*Kh*Kw (576 on a 64-channel 3x3 layer), lies
// along the 128-wide M of the tile and Cout along its 64-wide N:
//   M = (Cin/groups)*Kh*Kw, N = Cout/groups, K = batch*out_h*out_w,
//   A[(c,p,q)][(b,i,j)] = x[b, g*cg + c, i*sh - pt + p*dh, j*sw - pl + q*dw] (0 in the padding),
//   B[(b,i,j)][o]       = dy[b, g*og + o, i, j]   (k-contiguous: the B stage's order).
//   K is long (100352 terms on ResNet-50's 56x56 layers at batch 32), so it is split into
//   `slices` of slice_tiles k-tiles each, one grid row (blockIdx.y) per slice, a function of the
//   shape alone (ChooseSplitK). A slice accumulates as the forward does (blocked fp32); with one
//   slice the epilogue writes dw, otherwise each slice writes its partial dw (the layout of dw)
//   to the workspace and WgradSumAt (wgrad_split.h) adds them in its fixed order in double.
#ifndef CONV2D_CONV_IMPLICIT_GEMM_3XTF32_BACKWARD_H_
#define CONV2D_CONV_IMPLICIT_GEMM_3XTF32_BACKWARD_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"

namespace conv2d {
namespace implicit_gemm_3xtf32_internal {

// wgrad's split of K, its accumulator chunks and its centring: wgrad_split.h (shared with
// implicit_gemm_wgmma), at this kernel's k-tiles of kBK terms.
using wgrad_split::kMaxWorkspaceBytes;
using wgrad_split::kTargetCtas;
using wgrad_split::SplitK;
constexpr int WgradFoldTiles(int64_t k) { return wgrad_split::ChunkTerms(k) / kBK; }
static_assert(WgradFoldTiles(0) == kFoldTiles, "the forward's chunk up to K = 4608");
// ResourceExhausted when even the fewest slices the accuracy allows exceed the workspace cap.
absl::StatusOr<SplitK> ChooseSplitK(const Shape& shape);
inline size_t WgradWorkspaceBytes(const Shape& shape, const SplitK& split) {
  return wgrad_split::WorkspaceBytes(shape, split);
}
// The reduction's view of the kernel's parameters.
CONV2D_HOST_DEVICE_INLINE wgrad_split::Sum SumOf(const Params& p) {
  wgrad_split::Sum s;
  s.slices = p.slices;
  s.red = p.red;
  s.og = p.og;
  s.cg = p.cg;
  s.khkw = p.kh * p.kw;
  s.dy_runs = p.dy_runs;
  s.centers = p.centers;
  s.dy_sums = p.dy_sums;
  return s;
}
template <class T>
CONV2D_HOST_DEVICE_INLINE float WgradSumAt(const Params& p, const T* part, int64_t e, int64_t n) {
  return wgrad_split::SumAt(SumOf(p), part, e, n);
}

// The N tile's group and its first column within the group.
CONV2D_HOST_DEVICE_INLINE void GroupTile(const Params& p, int n_tile, int* g, int* n0) {
  *g = p.div_n_tiles_group.Div(n_tile);
  *n0 = (n_tile - *g * p.n_tiles_group) * kBN;
}

// dgrad. A: thread t owns dx pixel column t % kBM and 8 consecutive k rows, as the forward's
// scalar AGather (coalesced along pixels; one division for the first tap, then steps). B: thread
// t copies k column t % 16 of channel rows t/16 + 16*i, as the forward's scalar BGather.
struct DgradOp {
  static constexpr int kACopy = 1;
  static constexpr int kBCopy = 1;
  static constexpr int kFold = kFoldTiles;  // the forward's terms per sum, the forward's fold
  static constexpr int kARows = kBK * kBM / kThreads;
  static constexpr int kBCopies = kBK * kBN / kThreads;
  int m0 = 0, n0 = 0, g = 0;
  int col = 0, row0 = 0, kcol = 0, brow0 = 0;
  bool m_valid = false;
  int hb = 0, vb = 0;  // the pixel's row and column in the padded image
  int abase = 0;       // dy offset of (b, g*og, 0, 0)

  CONV2D_HOST_DEVICE_INLINE void Init(const Params& p, int m_tile, int n_tile, int, int tid) {
    m0 = m_tile * kBM;
    GroupTile(p, n_tile, &g, &n0);
    col = tid % kBM;
    row0 = (tid / kBM) * kARows;
    kcol = tid % kBK;
    brow0 = tid / kBK;
    const int m = m0 + col;
    m_valid = m < p.m;
    if (m_valid) {
      const int b = p.div_hw.Div(m);
      const int pix = m - b * p.hw;
      const int h = p.div_w.Div(pix);
      hb = h + p.pt;
      vb = pix - h * p.w + p.pl;
      abase = b * p.cout_p + g * p.og * p.p;
    }
  }

  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEachA(const Params& p, int kt, F&& f) const {
    const int kg = kt * kBK + row0;
    int o = p.div_khkw.Div(kg);
    const int r = kg - o * (p.kh * p.kw);
    int kp = p.div_kw.Div(r);
    int kq = r - kp * p.kw;
CONV2D_UNROLL
    for (int i = 0; i < kARows; ++i) {
      int ofs = 0;
      bool valid = false;
      const int ih = hb - kp * p.dh, iv = vb - kq * p.dw;
      if (m_valid && kg + i < p.k && ih >= 0 && iv >= 0) {
        const int oi = p.div_sh.Div(ih), oj = p.div_sw.Div(iv);
        valid = oi * p.sh == ih && oj * p.sw == iv && oi < p.oh && oj < p.ow;
        if (valid) ofs = abase + o * p.p + oi * p.ow + oj;
      }
      f((row0 + i) * kAStride + col, ofs, valid);
      if (++kq == p.kw) {
        kq = 0;
        if (++kp == p.kh) {
          kp = 0;
          ++o;
        }
      }
    }
  }

  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEachB(const Params& p, int kt, F&& f) const {
    const int k = kt * kBK + kcol;
    const int o = p.div_khkw.Div(k);
    const int r = k - o * (p.kh * p.kw);
CONV2D_UNROLL
    for (int i = 0; i < kBCopies; ++i) {
      const int row = brow0 + i * (kThreads / kBK);
      const int n = n0 + row;
      const bool valid = n < p.cg && k < p.k;
      f(row * kBStride + kcol, valid ? (g * p.og + o) * p.red + n * (p.kh * p.kw) + r : 0, valid);
    }
  }

  CONV2D_HOST_DEVICE_INLINE int KBegin(const Params&) const { return 0; }
  CONV2D_HOST_DEVICE_INLINE int KEnd(const Params& p) const { return p.k_tiles; }
  // dx[b, g*cg + n, pix] = b*cin*h*w + (g*cg + n)*h*w + pix = m + b*(cin-1)*h*w + ...
  CONV2D_HOST_DEVICE_INLINE int RowBase(const Params& p, int m) const {
    if (m >= p.m) return -1;
    const int b = p.div_hw.Div(m);
    return m + b * (p.cin - 1) * p.hw + g * p.cg * p.hw;
  }
  CONV2D_HOST_DEVICE_INLINE int ColStride(const Params& p) const { return p.hw; }
  CONV2D_HOST_DEVICE_INLINE int NLimit(const Params& p) const { return p.cg; }
  CONV2D_HOST_DEVICE_INLINE float A(float v, int, int) const { return v; }
};

// wgrad. A (x): thread t copies k columns t%4 + 4*j (j < 4) of tap rows t/4 and t/4 + 64: a warp
// writes 4 k x 8 consecutive m, 32 distinct banks (kAStride = 8 mod 32), and reads 8 runs of 4
// consecutive pixels. A thread's two taps are decoded once; each k-tile decodes its 4 pixels. B
// (dy): as DgradOp's B, k column t % 16 of rows t/16 + 16*i, 64 contiguous bytes per half warp.
// kCentred: A() takes x's channel centres (p.centers, wgrad_split::Centres's shapes); otherwise A() is
// the identity and the kernel the one before centring (its FADD per A element measured +2%).
template <bool kCentred>
struct WgradOp {
  static constexpr int kACopy = 1;
  static constexpr int kBCopy = 1;
  static constexpr int kFold = 0;  // p.fold_tiles: WgradFoldTiles
  static constexpr int kAK = 4;  // k columns per thread
  static constexpr int kAM = kBK * kBM / kThreads / kAK;  // tap rows per thread: 2
  static constexpr int kBCopies = kBK * kBN / kThreads;
  int m0 = 0, n0 = 0, g = 0, kt0 = 0, kt1 = 0;
  int kc = 0, mr = 0, kcol = 0, brow0 = 0;
  int out_base = 0;          // the slice's partial dw (or dw) at (g*og, 0)
  implicit_gemm_view::WgradTaps<kAM> taps;  // the thread's tap rows, x offsets within group g
  // The centre of each of the thread's A fragment rows (mi, gid or gid + 8): wgrad_split::Center.
  float center[kMmaTilesM][2] = {};

  CONV2D_HOST_DEVICE_INLINE void Init(const Params& p, int m_tile, int n_tile, int slice,
                                      int tid) {
    m0 = m_tile * kBM;
    GroupTile(p, n_tile, &g, &n0);
    kt0 = slice * p.slice_tiles;
    kt1 = kt0 + p.slice_tiles < p.k_tiles ? kt0 + p.slice_tiles : p.k_tiles;
    out_base = slice * p.slice_stride + g * p.og * p.red;
    kc = tid % kAK;
    mr = tid / kAK;
    kcol = tid % kBK;
    brow0 = tid / kBK;
CONV2D_UNROLL
    for (int i = 0; i < kAM; ++i) taps.Set(p, i, m0 + mr + i * (kBM / kAM), g * p.cg * p.hw);
    if (kCentred && p.centers != nullptr) {
      const int lane = tid % 32, row0 = m0 + WarpM0(tid / 32) + lane / 4;
CONV2D_UNROLL
      for (int mi = 0; mi < kMmaTilesM; ++mi)
CONV2D_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int m = row0 + mi * 16 + 8 * h;
          center[mi][h] = m < p.m ? p.centers[g * p.cg + p.div_khkw.Div(m)] : 0.f;
        }
    }
  }

  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEachA(const Params& p, int kt, F&& f) const {
CONV2D_UNROLL
    for (int j = 0; j < kBK / kAK; ++j) {
      const int kl = kc + j * kAK;
      taps.ForTerm(p, kt * kBK + kl, [&](int i, int off, bool valid) {
        f(kl * kAStride + mr + i * (kBM / kAM), off, valid);
      });
    }
  }

  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEachB(const Params& p, int kt, F&& f) const {
    const int k = kt * kBK + kcol;
    const int b = p.div_p.Div(k);
    const int base = b * p.cout_p + g * p.og * p.p + (k - b * p.p);
CONV2D_UNROLL
    for (int i = 0; i < kBCopies; ++i) {
      const int row = brow0 + i * (kThreads / kBK);
      const int n = n0 + row;
      const bool valid = n < p.og && k < p.k;
      f(row * kBStride + kcol, valid ? base + n * p.p : 0, valid);
    }
  }

  CONV2D_HOST_DEVICE_INLINE int KBegin(const Params&) const { return kt0; }
  CONV2D_HOST_DEVICE_INLINE int KEnd(const Params&) const { return kt1; }
  // dw[g*og + n][m] (dw's rows are the filters, red long), in this slice's partial.
  CONV2D_HOST_DEVICE_INLINE int RowBase(const Params& p, int m) const {
    return m < p.m ? out_base + m : -1;
  }
  CONV2D_HOST_DEVICE_INLINE int ColStride(const Params& p) const { return p.red; }
  CONV2D_HOST_DEVICE_INLINE int NLimit(const Params& p) const { return p.og; }
  // A fragment register `reg` of mma tile mi: row gid + 8 * (reg & 1) (implicit_gemm_3xtf32.h).
  CONV2D_HOST_DEVICE_INLINE float A(float v, int mi, int reg) const {
    return kCentred ? v - center[mi][reg & 1] : v;
  }
};

}  // namespace implicit_gemm_3xtf32_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_IMPLICIT_GEMM_3XTF32_BACKWARD_H_
