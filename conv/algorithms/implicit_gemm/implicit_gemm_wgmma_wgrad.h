// implicit_gemm_wgmma's weight gradient: the forward's kernel (its ring, its consumers' split of
// A into TF32 hi/lo register operands, its three wgmma per k8 step, its fold and epilogue) over
// wgrad's GEMM, per group:
//   M = (Cin/groups)*Kh*Kw taps, N = Cout/groups, K = batch*out_h*out_w,
//   A[(c,r,s)][(b,i,j)] = x[b, g*cg + c, i*sh - pt + r*dh, j*sw - pl + s*dw] (0 in the padding),
//   B[(b,i,j)][o]       = dy[b, g*og + o, i, j],
//   dw[g*og + o][(c,r,s)] = sum over k of A * B.
// (The larger side, the taps, along the tile's 128 rows, as in implicit_gemm_3xtf32's wgrad.)
// What differs from the forward is the copy warpgroup's work and the walk:
//  - A: x gathered by cp.async into the forward's A stage layout ([kBK] k rows of kBM taps),
//    WgradAGather's map; the consumers split it as they split the forward's x. Where x is
//    centred (wgrad_split.h) the consumers subtract each row's channel centre before the split.
//  - B: dy is K-major already (a channel's pixels are consecutive floats), but wgmma wants its
//    TF32 hi and lo planes in the 128-byte swizzled image. Splitting dy into the workspace first
//    would write and read it twice more (ResNet-50's dy is ~1.3 GB a step); instead the copy
//    threads copy dy raw into the lo plane by cp.async (WgradBGather: one k column of BN/4
//    channels each, or a 16-byte chunk of BN/16 channels where the plane allows), and the
//    consumers, once the stage has landed, split it in place into both planes (each thread a
//    share, while the previous stage's last wgmma run), then meet at a named barrier before
//    their wgmma.
//  - The walk: K is cut into wgrad_split's slices (a function of the shape), a unit is one
//    (M tile, N tile, slice), CTA c takes units c, c + grid, ... (SliceWalk), each accumulated on
//    its own in chunks of wgrad_split::ChunkTerms (fold_tiles k-tiles), and stores its partial
//    dw into the slice's copy of dw in the workspace (or dw itself with one slice and no
//    centring); wgrad_split::SumSlices adds the slices in double. No stream-K tail: the slices
//    give every SM work.
// Plain C++ for the device and the CPU replay (implicit_gemm_wgmma_wgrad_cpu_test).
#ifndef CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_WGMMA_WGRAD_H_
#define CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_WGMMA_WGRAD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_internal.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/host_device.h"
#include "conv/shape.h"

namespace conv2d {
namespace implicit_gemm_wgmma_internal {

// The kernel's kWgrad template argument, a set of these bits: wgrad at all, x centred, dy copied
// in 16-byte chunks (WgradBGather<BN, 4>).
enum WgradBits : int { kWgradOn = 1, kWgradCentred = 2, kWgradVecB = 4 };

// The swapped orientation. For a 1x1 filter at stride 1 without padding, dilation or groups, x
// and dy are alike ([batch][channels][pixels], the same pixels), and dw[o][c] = sum over k of
// x[c][k] dy[o][k] is also the wgrad of the shape with the channel counts exchanged, taken with x
// and dy exchanged, transposed. Where Cin is small against Cout (EfficientNet's expansions,
// ResNet's 64 -> 256) that puts the many output channels on the tile's 128 rows instead of a
// few input channels (16 of 128 rows used at 16 -> 96). Not where the reduction is centred
// (wgrad_split::Centres: past kCenterK terms): the centring subtracts x's channel centres from
// the GEMM's A operand, which swapped is dy, whose planes have no mean to take out, while x's
// (ReLU-like activations: large) would stay in every product.
inline bool CanSwapWgrad(const Shape& s) {
  return s.kernel_h == 1 && s.kernel_w == 1 && !s.strided() && !s.padded() && !s.dilated() &&
         !s.grouped() && !wgrad_split::Centres(s.batch * s.out_h() * s.out_w());
}
// The model's time of dw's transpose after a swapped wgrad: dw read and written at 3 TB/s and a
// launch.
inline double SwappedTransposeSeconds(const Shape& s) {
  return 8.0 * static_cast<double>(s.filter_elements()) / 3e12 + 3e-6;
}
inline Shape SwappedWgrad(const Shape& s) {
  Shape t = s;
  t.in_channels = s.out_channels;
  t.out_channels = s.in_channels;
  t.has_bias = false;  // db is the plan's (from dy), never the kernel's
  return t;
}

// The reasons (if any) that wgrad of `shape` cannot be indexed in 32 bits.
absl::Status CheckWgradIndexing(const Shape& shape);
// N tiles of the wgrad GEMM: each group's output channels tiled on their own, BN wide.
int64_t WgradTiles(const Shape& shape, int bn);
// The split of K for BN-wide tiles: within wgrad_split::SliceLimits at this kernel's kBK, the
// slice count whose modelled time is least on kSplitSms SMs (the longest CTA's units, and the
// slices' partials through memory). A constant SM count, not the device's: the split sets how dw
// is rounded, which must not depend on the GPU. (wgrad_split::ChooseSplitK's rule, ceil(528 /
// tiles) slices, left ResNet's 64-channel 3x3 layer 530 units for 264 slots: three rounds, the
// last of two units.)
constexpr int kSplitSms = 132;
absl::StatusOr<wgrad_split::SplitK> WgradSplitK(const Shape& shape, int bn);
// The kernel's parameters for wgrad at BN with `slots` CTAs at once and the split `split`;
// requires CheckWgradIndexing. m, k, k_tiles, m_tiles, n_tiles and tiles are wgrad's GEMM's.
Params MakeWgradParams(const Shape& shape, int bn, int slots, const wgrad_split::SplitK& split);

// A CTA's walk: unit u = slice * tiles + tile (tile = m_tile * n_tiles + n_tile), u = cta, cta +
// grid, ...: the CTAs running together share a slice's k range (its x and dy through L2).
struct SliceWalk {
  int next = 0;
  CONV2D_HOST_DEVICE_INLINE SliceWalk(const Params&, int cta) : next(cta) {}
  CONV2D_HOST_DEVICE_INLINE bool Next(const Params& p, WorkUnit* w) {
    if (next >= p.units) return false;
    const int slice = next / p.tiles;
    const int tile = next - slice * p.tiles;
    w->m_tile = tile / p.n_tiles;
    w->n_tile = tile - w->m_tile * p.n_tiles;
    w->kt_begin = slice * p.slice_tiles;
    const int left = p.k_tiles - w->kt_begin;
    w->stages = left < p.slice_tiles ? left : p.slice_tiles;
    next += p.grid;
    return true;
  }
};

// Where a unit's row m (a tap of the group's filter) goes: the slice's copy of dw (one slice
// without centring: dw itself), dw's rows being filters of red taps; -1 past M.
CONV2D_HOST_DEVICE_INLINE int WgradRowBase(const Params& p, const WorkUnit& wu, int m) {
  return m < p.m ? (wu.kt_begin / p.slice_tiles) * p.slice_stride + m : -1;
}

// The x gather of copy thread t (0..kCopyThreads-1) into the A stage ([kBK][kAStride], k rows of
// taps): k columns kc + 4j (j < 8) of tap rows mr + 32i (i < 4), kc = t % 4, mr = 8*(t / 32) +
// (t % 32) / 4. A warp's copy writes 4 k rows x 8 consecutive taps: banks 8*k + m (mod 32), 32
// distinct; it reads 4 consecutive pixels (16 bytes at stride 1) of each of 8 taps. Init decodes
// the thread's four taps once per unit; each k column costs two FastDivs a k-tile.
struct WgradAGather {
  static constexpr int kCols = 8;  // k columns a thread copies per stage
  static constexpr int kRows = 4;  // tap rows
  static_assert(kCols * kRows * kCopyThreads == kBK * kBM, "the threads cover the stage");
  int kc = 0, mr = 0;
  implicit_gemm_view::WgradTaps<kRows> taps;  // rows mr + 32i, from the group's first channel

  CONV2D_HOST_DEVICE_INLINE void Init(const Params& p, int m0, int t) {
    kc = t % 4;
    mr = 8 * (t / 32) + (t % 32) / 4;
CONV2D_UNROLL
    for (int i = 0; i < kRows; ++i) taps.Set(p, i, m0 + mr + 32 * i, 0);
  }

  // f(float index in the A stage, x offset from the group's first channel, valid) for this
  // thread's copies of k-tile kt; invalid copies (padding, k past K, tap past M) zero-fill and
  // carry offset 0.
  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEach(const Params& p, int kt, F&& f) const {
CONV2D_UNROLL
    for (int j = 0; j < kCols; ++j) {
      const int kl = kc + 4 * j;
      taps.ForTerm(p, kt * kBK + kl, [&](int i, int off, bool valid) {
        f(kl * kAStride + mr + 32 * i, off, valid);
      });
    }
  }
};

// The dy copies into the B stage of k-tile kt of the N tile [n0, n_end), kV floats each (1, or 4
// where every four consecutive terms lie in one image and 16 bytes apart from its start:
// CanVectorizeDy). With kC = kBK / kV copies per channel row, copy thread t takes k columns
// kV(t % kC) .. +kV-1 of channels n0 + t / kC + kR·j, kR = kCopyThreads / kC (4 or 16). A warp
// reads 128 contiguous bytes of each channel it touches (where the k-tile lies in one image) and
// writes whole 128-byte swizzle rows (conflict-free). f(j, float offset in a plane (BTileOffset),
// dy offset, valid).
template <int BN, int kV>
struct WgradBGather {
  static constexpr int kC = kBK / kV;
  static constexpr int kR = kCopyThreads / kC;
  static constexpr int kPerThread = BN / kR;
  static_assert((kV == 1 || kV == 4) && kPerThread * kV * kCopyThreads == BN * kBK,
                "the threads cover the stage");
  // Channel t / kC + kR·j is row (t / kC + (kR·j) % 8) of atom (kR·j) / 8 on from t's: the slots
  // are one or two offsets plus multiples of an atom (256 floats), immediates, not 8-32 registers
  // (the copy warps, at 40-56 registers, spilled with them).
  CONV2D_HOST_DEVICE_INLINE static int Slot(int t, int j) {
    return BTileOffset(t / kC + (kR * j) % 8, kV * (t % kC)) + (kR * j) / 8 * 256;
  }
  template <class F>
  CONV2D_HOST_DEVICE_INLINE static void ForEach(const Params& p, int n0, int n_end, int kt, int t,
                                                F&& f) {
    const int k = kt * kBK + kV * (t % kC);
    const bool k_valid = k < p.k;  // with kV = 4, K = batch*P is a multiple of 4: whole or absent
    int base = 0;
    if (k_valid) {
      const int b = p.div_p.Div(k);
      base = b * p.cout_p + (k - b * p.p);
    }
    const int n_first = n0 + t / kC;
CONV2D_UNROLL
    for (int j = 0; j < kPerThread; ++j) {
      const int n = n_first + kR * j;
      const bool valid = k_valid && n < n_end;
      f(j, Slot(t, j), valid ? base + n * p.p : 0, valid);
    }
  }
};

// Whether dy can be copied in 16-byte chunks (WgradBGather<BN, 4>).
inline bool CanVectorizeDy(const Params& p, uintptr_t dy) {
  return p.p % 4 == 0 && dy % 16 == 0;
}

// The centre (wgrad_split::Center) of consumer row m of a unit of N tile nt: its input channel's,
// 0 past M.
CONV2D_HOST_DEVICE_INLINE float WgradRowCenter(const Params& p, int nt, int m) {
  if (m >= p.m) return 0.f;
  const int g = nt / p.n_tiles_g;
  return p.centers[g * p.cg + p.div_khkw.Div(m)];
}

// ---- The im2col form (small reductions).
// Where K = batch*out_h*out_w is short (7x7 planes: 1,568 terms at batch 32) the x gather above
// costs what the tensor cores save: four bytes and a FastDiv pair a copy, measured at 0.32 warp
// instructions a cycle and 25% SM busy on ResNet-50's 3x3 wgrad at 7x7 (ncu, PERF.md round 104),
// 0.23 ms against the forward's 0.10 on the same FLOPs. There dw is the forward's 1x1 GEMM of
// one image: with
//   col[k][m] = x[b, c, i*sh - pt + r*dh, j*sw - pl + s*dw]  (0 in the padding),
//   dyt[o][k] = dy[b, o, i, j],     k = (b, i, j), m = (c, r, s),
// dw[o][m] = sum over k of dyt[o][k] col[k][m] is the forward of Im2colForward(shape): x = col
// (K channels of one row of M = Cin*Kh*Kw pixels), w = dyt (Cout filters of K taps), y = dw,
// which the forward's kernel runs with its 16-byte A copies (M % 4 == 0). Two passes build col
// and dyt (x and dy read once, col written: 29 MB on that layer). Its sum is the forward's, K
// terms in fp32 folded every 128: within kMaxContractReduction terms, the bound wgrad's slices
// keep (wgrad_split.h), so no slices and no centring (K <= kCenterK).
// (Its passes index col, dyt, x and dy in 32 bits, and dyt's grid rows are output channels.)
inline bool Im2colTakes(const Shape& s) {
  constexpr int64_t k32 = int64_t{1} << 31;
  const int64_t k = s.batch * s.out_h() * s.out_w(), m = s.reduction();
  return s.op == Op::kWgrad && !s.grouped() && k <= kMaxContractReduction && m % 4 == 0 &&
         k * m < k32 && s.out_channels * k < k32 && s.input_elements() < k32 &&
         s.output_elements() < k32 && s.out_channels <= 65535;
}
inline Shape Im2colForward(const Shape& s) {
  Shape v;
  v.op = Op::kFprop;
  v.batch = 1;
  v.in_channels = s.batch * s.out_h() * s.out_w();
  v.out_channels = s.out_channels;
  v.height = 1;
  v.width = s.reduction();
  v.kernel_h = v.kernel_w = 1;
  return v;
}
// The geometry the two passes read: col's row k, column m.
struct Im2colMap {
  int cin = 0, h = 0, w = 0, cout = 0, oh = 0, ow = 0, kw = 0;
  int sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0;
  int k = 0;           // batch*out_h*out_w: col's rows
  int m = 0;           // Cin*Kh*Kw: its columns
  FastDiv div_p;       // by out_h*out_w
  FastDiv div_ow, div_khkw, div_kw;
};
inline Im2colMap MakeIm2colMap(const Shape& s) {
  Im2colMap g;
  g.cin = static_cast<int>(s.in_channels), g.h = static_cast<int>(s.height);
  g.w = static_cast<int>(s.width), g.cout = static_cast<int>(s.out_channels);
  g.oh = static_cast<int>(s.out_h()), g.ow = static_cast<int>(s.out_w());
  g.kw = static_cast<int>(s.kernel_w);
  g.sh = static_cast<int>(s.stride_h), g.sw = static_cast<int>(s.stride_w);
  g.dh = static_cast<int>(s.dilation_h), g.dw = static_cast<int>(s.dilation_w);
  g.pt = static_cast<int>(s.pad_top), g.pl = static_cast<int>(s.pad_left);
  g.k = static_cast<int>(s.batch * s.out_h() * s.out_w());
  g.m = static_cast<int>(s.reduction());
  g.div_p = FastDiv(static_cast<uint32_t>(g.oh * g.ow));
  g.div_ow = FastDiv(static_cast<uint32_t>(g.ow));
  g.div_khkw = FastDiv(static_cast<uint32_t>(s.kernel_h * s.kernel_w));
  g.div_kw = FastDiv(static_cast<uint32_t>(g.kw));
  return g;
}
// The x offset col[k][m] copies, or -1 in the padding.
CONV2D_HOST_DEVICE_INLINE int Im2colSource(const Im2colMap& g, int k, int m) {
  int b, pix, i, j, c, tap, r, s;
  g.div_p.DivMod(k, &b, &pix);
  g.div_ow.DivMod(pix, &i, &j);
  g.div_khkw.DivMod(m, &c, &tap);
  g.div_kw.DivMod(tap, &r, &s);
  const int y = i * g.sh - g.pt + r * g.dh, x = j * g.sw - g.pl + s * g.dw;
  if (static_cast<unsigned>(y) >= static_cast<unsigned>(g.h) ||
      static_cast<unsigned>(x) >= static_cast<unsigned>(g.w)) {
    return -1;
  }
  return ((b * g.cin + c) * g.h + y) * g.w + x;
}
// The dy offset dyt[o][k] copies.
CONV2D_HOST_DEVICE_INLINE int Im2colDySource(const Im2colMap& g, int o, int k) {
  int b, pix;
  g.div_p.DivMod(k, &b, &pix);
  return (b * g.cout + o) * (g.oh * g.ow) + pix;
}

}  // namespace implicit_gemm_wgmma_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_WGMMA_WGRAD_H_
