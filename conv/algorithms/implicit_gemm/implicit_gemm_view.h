// The GEMM view of the convolution that both implicit-GEMM kernels compute (implicit_gemm_3xtf32
// on mma.sync, implicit_gemm_wgmma on wgmma):
//
//   GEMM_M = batch*out_h*out_w (output pixels), GEMM_N = out_channels, GEMM_K = in_channels*kh*kw
//   A[m][k] = x[b, c, oh+p, ow+q]   gathered on the fly (im2col is never materialised)
//   B[k][n] = w[n][k]               the OIHW filter is already [Cout][K], K-contiguous
//   y[b, n, oh, ow] = sum_k A[m][k] * B[k][n]
//
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
// and N tiles of bn channels.
template <class P>
void SetGemmView(const Shape& s, int bk, int bn, P* p) {
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
  p->k = p->cin * p->kh * p->kw;
  p->k_tiles = static_cast<int>(CeilDiv(p->k, bk));
  p->n_tiles = static_cast<int>(CeilDiv(p->cout, bn));
  p->div_p = FastDiv(static_cast<uint32_t>(p->p));
  p->div_ow = FastDiv(static_cast<uint32_t>(p->ow));
  p->div_khkw = FastDiv(static_cast<uint32_t>(p->kh * p->kw));
  p->div_kw = FastDiv(static_cast<uint32_t>(p->kw));
}

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

// Whether the 16-byte input gather applies: Kw = 1 and W % 4 = 0 (then four consecutive output
// pixels are four consecutive, 16-byte aligned input floats, and M % 4 = 0), x 16-byte aligned.
template <class P>
CONV2D_HOST_DEVICE_INLINE bool CanVectorizeA(const P& p, uintptr_t x) {
  return p.kw == 1 && p.w % 4 == 0 && x % 16 == 0;
}

}  // namespace implicit_gemm_view
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_VIEW_H_
