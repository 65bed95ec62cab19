// The GEMM view of the convolution that both implicit-GEMM kernels compute (implicit_gemm_3xtf32
// on mma.sync, implicit_gemm_wgmma on wgmma):
//
//   GEMM_M = batch*out_h*out_w (output pixels), GEMM_N = out_channels, GEMM_K = in_channels*kh*kw
//   A[m][k] = x[b, c, oh+p, ow+q]   gathered on the fly (im2col is never materialised); with
//             padding, stride and dilation (implicit_gemm_wgmma's geometry gather)
//             x[b, c, oh*sh - pt + p*dh, ow*sw - pl + q*dw], zero outside the image
//   B[k][n] = w[n][k]               the OIHW filter is already [Cout][K], K-contiguous
//   y[b, n, oh, ow] = sum_k A[m][k] * B[k][n]
//
// With groups (implicit_gemm_wgmma) one such GEMM per group: GEMM_K = (in_channels/groups)*kh*kw,
// N the group's out_channels/groups channels, c counted from the group's first input channel;
// the N tiles are numbered group by group (groups * ceil(Cout/groups / bn) of them).
// in 32-bit integers: each kernel's CheckIndexing bounds every index it forms below 2^31, so the
// divisions are FastDiv's (conv/arch/fast_div.h). The helpers are templates over the kernel's
// Params: both have the fields below by name, and their layouts (kernel parameters, so also
// their constant-bank offsets) differ past them. Plain C++ for the device and the CPU replays.
#ifndef CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_VIEW_H_
#define CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_VIEW_H_

#include <cstdint>

#include "conv/arch/fast_div.h"
#include "conv/arch/host_device.h"
#include "conv/arch/int_math.h"
#include "conv/shape.h"

namespace conv2d {
namespace implicit_gemm_view {

// Fills the view's fields of p for a shape that passed CheckIndexing, with k-tiles of bk terms
// and N tiles of bn channels. P's geometry fields: sh, sw, dh, dw, pt, pl, dh_w (dilation_h * w)
// and geometry (whether the shape needs the geometry gather: padding, stride or dilation).
template <class P>
void SetGemmView(const Shape& s, int bk, int bn, P* p) {
  p->geometry = s.padded() || s.strided() || s.dilated();
  p->cin = static_cast<int>(s.in_channels);
  p->cout = static_cast<int>(s.out_channels);
  p->h = static_cast<int>(s.height);
  p->w = static_cast<int>(s.width);
  p->kh = static_cast<int>(s.kernel_h);
  p->kw = static_cast<int>(s.kernel_w);
  p->ow = static_cast<int>(s.out_w());
  p->hw = p->h * p->w;                            // one input channel plane
  p->cin_hw = p->cin * p->hw;                     // one input image
  p->p = static_cast<int>(s.out_h() * s.out_w());  // one output channel plane
  p->m = static_cast<int>(s.batch) * p->p;
  p->k = static_cast<int>(s.reduction());          // one group's: (cin / groups)*kh*kw
  p->k_tiles = static_cast<int>(CeilDiv(p->k, bk));
  p->n_tiles = static_cast<int>(s.groups * CeilDiv(s.out_per_group(), bn));
  p->div_p = FastDiv(static_cast<uint32_t>(p->p));
  p->div_ow = FastDiv(static_cast<uint32_t>(p->ow));
  p->div_khkw = FastDiv(static_cast<uint32_t>(p->kh * p->kw));
  p->div_kw = FastDiv(static_cast<uint32_t>(p->kw));
  p->sh = static_cast<int>(s.stride_h);
  p->sw = static_cast<int>(s.stride_w);
  p->dh_w = static_cast<int>(s.dilation_h * s.width);
  p->dw = static_cast<int>(s.dilation_w);
  p->dh = static_cast<int>(s.dilation_h);
  p->pt = static_cast<int>(s.pad_top);
  p->pl = static_cast<int>(s.pad_left);
}

// The geometry gather's tap masks hold one bit per kernel row and per kernel column.
constexpr int kMaxGeometryTaps = 16;

// GEMM row m's window with padding, stride and dilation: the input row and column of its first
// tap (negative inside the top or left padding) and the x offset they make for k = 0 (offsets
// of taps in the padding are formed but never read).
struct Origin {
  int base, row, col;
};
template <class P>
CONV2D_HOST_DEVICE_INLINE Origin OriginOf(const P& p, int m) {
  const int b = p.div_p.Div(m);
  const int pix = m - b * p.p;
  const int oh = p.div_ow.Div(pix);
  const int ow = pix - oh * p.ow;
  const int row = oh * p.sh - p.pt, col = ow * p.sw - p.pl;
  return Origin{b * p.cin_hw + row * p.w + col, row, col};
}

// wgrad's A operand, the view transposed: its rows are the taps m = c*kh*kw + r*kw + s of one
// group's filter, its columns the terms k (the forward's output pixels, OriginOf's m), and tap m
// of term k is x at term k's origin moved by (r*dh, s*dw), zero outside the image. A thread
// decodes its kN tap rows once (Set) and reads them for each of its terms (ForTerm); a row past
// M gets a row offset that puts every read of it outside the image.
template <int kN>
struct WgradTaps {
  static constexpr int kPastM = 1 << 29;
  int ofs[kN] = {};  // base + c*h*w + r*dh*w + s*dw (0 past M)
  int row[kN] = {};  // r*dh, or kPastM past M
  int col[kN] = {};  // s*dw
  template <class P>
  CONV2D_HOST_DEVICE_INLINE void Set(const P& p, int i, int m, int base) {
    const int c = p.div_khkw.Div(m);
    const int rs = m - c * (p.kh * p.kw);
    const int r = p.div_kw.Div(rs);
    const int s = rs - r * p.kw;
    const bool in_m = m < p.m;
    row[i] = in_m ? r * p.dh : kPastM;
    col[i] = s * p.dw;
    ofs[i] = in_m ? base + c * p.hw + row[i] * p.w + col[i] : 0;
  }
  // f(i, x offset of tap i of term k, valid); an invalid read (padding, k past K, a row past M)
  // carries offset 0.
  template <class P, class F>
  CONV2D_HOST_DEVICE_INLINE void ForTerm(const P& p, int k, F&& f) const {
    const bool k_valid = k < p.k;
    Origin o{0, 0, 0};
    if (k_valid) o = OriginOf(p, k);
CONV2D_UNROLL
    for (int i = 0; i < kN; ++i) {
      const int r = o.row + row[i], c = o.col + col[i];
      const bool valid = k_valid && r >= 0 && r < p.h && c >= 0 && c < p.w;
      f(i, valid ? o.base + ofs[i] : 0, valid);
    }
  }
};

// Which taps of a window at (row, col) fall inside the image: bit kp for kernel row kp, bit
// 16 + kq for kernel column kq (Kh, Kw <= kMaxGeometryTaps). Tap (kp, kq) is read iff both bits
// are set: TapBits(kp, kq) & mask == TapBits(kp, kq).
template <class P>
CONV2D_HOST_DEVICE_INLINE uint32_t TapMask(const P& p, int row, int col) {
  uint32_t mask = 0;
  for (int kp = 0; kp < p.kh; ++kp) {
    const int r = row + kp * p.dh;
    if (r >= 0 && r < p.h) mask |= 1u << kp;
  }
  for (int kq = 0; kq < p.kw; ++kq) {
    const int c = col + kq * p.dw;
    if (c >= 0 && c < p.w) mask |= 1u << (16 + kq);
  }
  return mask;
}
CONV2D_HOST_DEVICE_INLINE uint32_t TapBits(int kp, int kq) { return (1u << kp) | (1u << (16 + kq)); }

// The x offset of GEMM row m's pixel for k = 0: b*cin*h*w + oh*w + ow. The offsets are
// separable, A[m][k] at PixelBase(m) + c*h*w + p*w + q.
template <class P>
CONV2D_HOST_DEVICE_INLINE int PixelBase(const P& p, int m) {
  const int b = p.div_p.Div(m);
  const int pix = m - b * p.p;
  const int oh = p.div_ow.Div(pix);
  const int ow = pix - oh * p.ow;
  return b * p.cin_hw + oh * p.w + ow;
}

// The y offset of GEMM row m for output channel 0: y is NCHW, so b*cout*p + pix =
// m + b*(cout-1)*p; channel n adds n*p.
template <class P>
CONV2D_HOST_DEVICE_INLINE int YRowBase(const P& p, int m) {
  const int b = p.div_p.Div(m);
  return m + b * (p.cout - 1) * p.p;
}

// Whether the 16-byte input gather applies: the basic geometry, Kw = 1 and W % 4 = 0 (then four
// consecutive output pixels are four consecutive, 16-byte aligned input floats, and M % 4 = 0),
// x 16-byte aligned.
template <class P>
CONV2D_HOST_DEVICE_INLINE bool CanVectorizeA(const P& p, uintptr_t x) {
  return !p.geometry && p.kw == 1 && p.w % 4 == 0 && x % 16 == 0;
}

}  // namespace implicit_gemm_view
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_VIEW_H_
