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
//   to the workspace and SumSlicesAt adds them in slice order in double.
#ifndef CONV2D_CONV_IMPLICIT_GEMM_3XTF32_BACKWARD_H_
#define CONV2D_CONV_IMPLICIT_GEMM_3XTF32_BACKWARD_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32.h"
#include "conv/arch/float_bits.h"

namespace conv2d {
namespace implicit_gemm_3xtf32_internal {

// wgrad's split of K: a function of the shape only, never of the device, so that the rounding
// (and hence dw, bit for bit) is the same on every GPU and every call.
struct SplitK {
  int slices = 1;
  int slice_tiles = 0;
};
// wgrad's centring. dw[o, c, tap] = sum over k of x[c, k + tap] dy[o, k] is a sum of K terms
// (K = batch*out_h*out_w: 100,352 on ResNet-50's 56x56 layers); where x has a large mean (the
// large-mean class, x = |N(0, 1)| + 10) every term carries it while their sum cancels, and the
// mma accumulator's truncation (an error of ~ulp(partial sum) per mma, biased within a chunk)
// grows with the terms' magnitude. So beyond kCenterK terms, where even 32-term chunks pass the
// verified L * sqrt(K) (WgradFoldTiles), a channel c whose image 0 has |mean| > its standard
// deviation is centred: the GEMM takes x - center_c (center_c: that mean to 8 significant bits;
// the zero padding becomes -center_c too) and the reduction adds back center_c * sum(dy[:, o])
// in double: the same dw in exact arithmetic, with terms of the data's spread instead of its
// mean. Other channels (randn; ReLU-like data, mean 0.7 of the spread) keep center_c = 0, and
// where no channel is centred dy's channel sums (one more read of dy: +30-40% on ResNet's 1x1
// 56x56 wgrad, measured session 30) are skipped. Paid on every shape past kCenterK: the centres'
// pass over image 0 of x and an FADD per A element in the main loop (WgradOp<true>; +2%
// measured on shapes where it subtracted zeros); shorter reductions run WgradOp<false>.
constexpr int64_t kCenterK = 73728;
inline bool WgradCenters(int64_t k) { return k > kCenterK; }
// center_c from image 0's sum and sum of squares over its `plane` elements (0: not centred).
CONV2D_HOST_DEVICE_INLINE float WgradCenter(double sum, double sum_sq, int plane) {
  const double mean = sum / plane, var = sum_sq / plane - mean * mean;
  if (!(fabs(mean) <= 1e38) || !(mean * mean > var)) return 0.f;  // NaN, inf, or spread-bound
  return BitsFloat(FloatBits(static_cast<float>(mean)) & 0xffff8000u);
}
// A channel's sum from ChannelSums's runs, in their order.
CONV2D_HOST_DEVICE_INLINE double RunsSum(const double* sums, int c, int runs) {
  double s = 0;
  for (int r = 0; r < runs; ++r) s += sums[c * runs + r];
  return s;
}

// wgrad's accumulator chunk, in k-tiles: shorter as K grows. The chunks' errors (the mma
// accumulator's truncation bias, ~L^1.5 for a chunk of L terms) have random signs, so a sum of K
// terms errs ~ L * sqrt(K): the forward's verified case, 128-term chunks at K = 4608 (worst 0.41
// of the bar on large-mean data), holds L * sqrt(K) <= 128 * sqrt(4608) for K <= 4608 at 128,
// <= 18432 at 64 and <= 73728 at 32. Measured on the large-mean class at K = 100,352 (ResNet's
// 64-channel 3x3 56x56 layer, H100): 128-term chunks, 44 of 36,864 elements past the bar (worst
// 2.93x, round 97); 32-term chunks, rms 6.5e-4 and one element at 1.47x (round 98), the tf32
// model's rms (cpu_replay/tf32_model.h) within 2% of it. With x centred the model gives 1.3e-4
// at 32 terms (2.5e-4 at 64: the padding's -center_c terms remain; the CPU test's WgradChunk).
constexpr int WgradFoldTiles(int64_t k) {
  return k <= 4608 ? kFoldTiles : k <= 18432 ? kFoldTiles / 2 : kFoldTiles / 4;
}

// The CTAs the split aims for: two waves of two resident CTAs on each of an H100's 132 SMs. A
// constant, not the device's count: it sets how the sum is rounded.
constexpr int64_t kTargetCtas = 2 * 2 * 132;
// A slice holds at least two folds (256 terms), so that its partial tile (one store, one load
// in the reduction) stays small against its mma work, and at most kMaxContractReduction terms,
// so that each slice's fp32 sum is one the accuracy contract covers (algorithm.h).
constexpr int kMinSliceTiles = 2 * kFoldTiles;
constexpr int kMaxSliceTiles = static_cast<int>(kMaxContractReduction / kBK);
// The partial dw tiles' workspace cap.
constexpr int64_t kMaxWorkspaceBytes = int64_t{256} << 20;
// ResourceExhausted when even the fewest slices the accuracy allows exceed the cap.
absl::StatusOr<SplitK> ChooseSplitK(const Shape& shape);
// The workspace of a wgrad split (0 with one slice: the epilogue writes dw), with 256 bytes of
// alignment slack.
size_t WgradWorkspaceBytes(const Shape& shape, const SplitK& split);

// dw[e] from the slices' partials part[slice*n + e]: in slice order, in double (exact enough
// that the sum's rounding does not depend on K, and fixed, so the result is reproducible).
template <class T>
CONV2D_HOST_DEVICE_INLINE double SliceSum(const T* part, int64_t e, int64_t n, int slices) {
  double s = 0;
  for (int i = 0; i < slices; ++i) s += static_cast<double>(part[i * n + e]);
  return s;
}
template <class T>
CONV2D_HOST_DEVICE_INLINE float SumSlicesAt(const T* part, int64_t e, int64_t n, int slices) {
  return static_cast<float>(SliceSum(part, e, n, slices));
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
// kCentred: A() takes x's channel centres (p.centers, WgradCenters' shapes); otherwise A() is
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
  int tap_ofs[kAM] = {};     // x offset of tap row m for pixel (0, 0) of image 0, group g
  int tap_r[kAM] = {}, tap_c[kAM] = {};  // p*dh, q*dw
  bool tap_valid[kAM] = {};
  // The centre of each of the thread's A fragment rows (mi, gid or gid + 8): WgradCenter.
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
    for (int i = 0; i < kAM; ++i) {
      const int m = m0 + mr + i * (kBM / kAM);
      tap_valid[i] = m < p.m;
      const int c = p.div_khkw.Div(m);
      const int r = m - c * (p.kh * p.kw);
      const int kp = p.div_kw.Div(r);
      tap_r[i] = kp * p.dh;
      tap_c[i] = (r - kp * p.kw) * p.dw;
      tap_ofs[i] = tap_valid[i] ? (g * p.cg + c) * p.hw + tap_r[i] * p.w + tap_c[i] : 0;
    }
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
      const int k = kt * kBK + kl;
      const bool k_valid = k < p.k;
      int row = 0, col = 0, base = 0;
      if (k_valid) {
        const int b = p.div_p.Div(k);
        const int pix = k - b * p.p;
        const int i = p.div_ow.Div(pix);
        row = i * p.sh - p.pt;
        col = (pix - i * p.ow) * p.sw - p.pl;
        base = b * p.cin_hw + row * p.w + col;
      }
CONV2D_UNROLL
      for (int i = 0; i < kAM; ++i) {
        const int r = row + tap_r[i], c = col + tap_c[i];
        const bool valid = k_valid && tap_valid[i] && r >= 0 && r < p.h && c >= 0 && c < p.w;
        f(kl * kAStride + mr + i * (kBM / kAM), valid ? base + tap_ofs[i] : 0, valid);
      }
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

// dw[e] from the slices' partials (SumSlicesAt) plus, where x was centred, center_c * the sum
// of dy[:, o] (e = o * red + m, c = g * cg + m / (kh * kw)): in double, in a fixed order.
template <class T>
CONV2D_HOST_DEVICE_INLINE float WgradSumAt(const Params& p, const T* part, int64_t e, int64_t n) {
  double s = SliceSum(part, e, n, p.slices);
  if (p.centers != nullptr) {
    const int o = static_cast<int>(e / p.red), m = static_cast<int>(e - int64_t{o} * p.red);
    const float center = p.centers[o / p.og * p.cg + m / (p.kh * p.kw)];
    if (center != 0.f) s += static_cast<double>(center) * RunsSum(p.dy_sums, o, p.dy_runs);
  }
  return static_cast<float>(s);
}

}  // namespace implicit_gemm_3xtf32_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_IMPLICIT_GEMM_3XTF32_BACKWARD_H_
