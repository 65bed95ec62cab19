// "depthwise_dgrad": the data gradient of depthwise shapes (groups of one input channel, any
// channel multiplier) at stride > 1, by a gather in one pass over dx, each pixel written once,
// plus its channel's zero term (conv/shape.h: a non-finite tap reaches every dx of its channel).
// Two kernels:
//
// The block kernel (stride 2 in both axes, dilation 1, one output channel a group, square
// kernels of 3, 5 or 7, pad_top and pad_left of one parity: EfficientNet-B0's four strided
// depthwise layers). A thread computes one 2x2 block of dx, a pixel of each stride phase: the
// block's pixels read one window of ceil(k / 2) + 1 (or so) dy rows and columns, which the thread
// loads once into registers, and each pixel sums the taps of its phase, all compiled in
// (DepthwiseDgradBlock). Consecutive threads take consecutive blocks of a row, so that a warp's
// dy loads and dx stores cover adjacent columns; no shared memory, no barrier.
//
// The staged gather (the rest: other strides, dilations, multipliers, kernels): each dx pixel
// adds, for each tap that reaches it (transposed_dgrad.h's FoldAxis) and each output channel of
// its group, dy times that tap, in fp32 in a fixed order (rows, columns, then the multiplier's
// channels). One pass over dx (dx_pass.cuh); each CTA first stages the dy
// rows its pixels read (a quarter of dx at stride 2) and its channel's filter in shared memory,
// all loads in flight at once (read from global memory per tap, each pixel's loads waited in
// turn: 0.467 ms on the 3x3/2 at 112x112 on an H100, against a 0.064 ms floor, PERF.md round
// 103; staged, 0.347 ms in round 104: its per-pixel FoldAxis divisions and run-time loops).
//
// What both replace: the strided dgrad of the depthwise kernels by
// stride phases (transposed_dgrad.h), each phase a forward that reads all of dy and writes a
// workspace that a scatter reads back, for a handful of taps each (EfficientNet-B0's 3x3/2 at
// 112x112: four phases of 2x2, 2x1, 1x2 and 1x1 taps; 0.575 ms by fft_depthwise on an H100,
// cuDNN 0.492, PERF.md round 101). At stride 1 the depthwise forward on dy stays (3-5x cuDNN's
// on the nets' layers): this algorithm declines it.
#ifndef CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_DGRAD_H_
#define CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_DGRAD_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "conv/arch/host_device.h"
#include "conv/core/algorithm.h"
#include "conv/core/dx_pass.cuh"
#include "conv/core/transposed_dgrad.h"
#include "conv/shape.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeDepthwiseDgrad();

namespace depthwise_internal {

// Input channel c's filter values (its group's mult output channels x taps, contiguous): the
// zero term is NaN where one of them is not finite (conv/shape.h).
CONV2D_HOST_DEVICE_INLINE const float* DepthwiseChannelFilter(const float* w, int64_t c, int mult,
                                                               int64_t taps) {
  return w + c * mult * taps;
}

// The dy rows [lo, lo + rows) that dx rows [y0, y1] read: output i reaches row y where
// y + pad - p*d = s*i for a tap p in [0, kh), so i runs from ceil((y0 + pad - (kh-1)*d) / s) to
// floor((y1 + pad) / s), within [0, out_h).
struct DyRows {
  int lo = 0, rows = 0;
};
CONV2D_HOST_DEVICE_INLINE DyRows DepthwiseDgradRows(const FoldMap& m, int y0, int y1) {
  DyRows r;
  const int top = y0 + m.pt - (m.kh - 1) * m.dh;
  r.lo = top <= 0 ? 0 : (top + m.sh - 1) / m.sh;
  const int hi = (y1 + m.pt) / m.sh < m.out_h - 1 ? (y1 + m.pt) / m.sh : m.out_h - 1;
  r.rows = hi >= r.lo ? hi - r.lo + 1 : 0;
  return r;
}

// The most dy rows one CTA's chunk (dx_pass.cuh: kDxPassPixels consecutive pixels, so at most
// span + 1 dx rows) reads: floor((span + (kh-1)*d) / s) + 1, at most out_h. The kernel stages
// them, for every output channel of the group, in shared memory.
inline int DepthwiseDgradMaxRows(const FoldMap& m) {
  const int span = std::min(m.h - 1, (kDxPassPixels - 1) / m.w + 1);
  return std::min(m.out_h, (span + (m.kh - 1) * m.dh) / m.sh + 1);
}

// dx[b, c, y, x] without its zero term: for each tap (p, t) that reaches (y, x), in tap order,
// and each of the group's `mult` output channels k, dy[b, c*mult + k, i, j] * w[c*mult + k, 0,
// p, t]. `m` is MakeFoldMap's of the dgrad; `g` holds dy's rows from `lo` on (out_w each) of
// those channels, `g_plane` apart; `f` is DepthwiseChannelFilter's. The kernel passes its
// shared-memory window, the CPU test the whole of dy.
template <typename T>
CONV2D_HOST_DEVICE_INLINE T DepthwiseDgradPixel(const FoldMap& m, int mult, const float* g,
                                                int lo, int64_t g_plane, const float* f, int y,
                                                int x) {
  const int taps = m.kh * m.kw;
  const FoldRun r = FoldAxis(y, m.pt, m.kh, m.div_sh, m.dh, m.out_h, m.step_h, m.back_h);
  const FoldRun q = FoldAxis(x, m.pl, m.kw, m.div_sw, m.dw, m.out_w, m.step_w, m.back_w);
  T sum = 0;
  for (int a = r.k0; a <= r.k1; ++a) {
    const int p = r.first + m.step_h * a, i = r.out0 - m.back_h * a - lo;
    for (int e = q.k0; e <= q.k1; ++e) {
      const int t = q.first + m.step_w * e, j = q.out0 - m.back_w * e;
      for (int k = 0; k < mult; ++k) {
        sum += static_cast<T>(g[k * g_plane + i * m.out_w + j]) *
               static_cast<T>(f[k * taps + p * m.kw + t]);
      }
    }
  }
  return sum;
}

// The block kernel's window: dx pixel (2Y + a, 2X + b) is reached by tap (p, t) from dy (Y + uh
// + (a + v - p) / 2, X + uw + (b + v - t) / 2) where a + v - p and b + v - t are even, for pad_top
// = 2*uh + v and pad_left = 2*uw + v. Over a, b in {0, 1} and the taps of a kK kernel those
// offsets run from DgradBlockLo to DgradBlockHi.
constexpr int DgradBlockLo(int k, int v) {
  int lo = 0;
  for (int a = 0; a < 2; ++a)
    for (int p = 0; p < k; ++p)
      if ((a + v + p) % 2 == 0 && (a + v - p) / 2 < lo) lo = (a + v - p) / 2;
  return lo;
}
constexpr int DgradBlockHi(int k, int v) {
  int hi = -k;
  for (int a = 0; a < 2; ++a)
    for (int p = 0; p < k; ++p)
      if ((a + v + p) % 2 == 0 && (a + v - p) / 2 > hi) hi = (a + v - p) / 2;
  return hi;
}

// Whether the block kernel takes the dgrad shape `s`.
bool DgradTakesBlocks(const Shape& s);

// One 2x2 block of dx without its zero term: out[a][b] = dx[2Y + a, 2X + b]. `g`: dy's plane
// (out_h x out_w) of the block's channel; `f`: its kK x kK filter; (i0, j0) = (Y + uh + lo, X +
// uw + lo), the window's first dy row and column (lo = DgradBlockLo(kK, kV)). Each pixel sums
// its phase's taps in tap order, in fp32 with fmaf from zero; dy outside the plane is read as
// zero (its terms then add a signed zero: the sum is the gather's up to the sign of a zero).
// The kernel passes global memory, the CPU test host arrays.
template <int kK, int kV>
CONV2D_HOST_DEVICE_INLINE void DepthwiseDgradBlock(const float* g, const float* f, int out_h,
                                                   int out_w, int i0, int j0,
                                                   float (&out)[2][2]) {
  constexpr int kLo = DgradBlockLo(kK, kV), kWin = DgradBlockHi(kK, kV) - kLo + 1;
  float win[kWin][kWin];
CONV2D_UNROLL
  for (int r = 0; r < kWin; ++r) {
    const bool row_in = static_cast<unsigned>(i0 + r) < static_cast<unsigned>(out_h);
CONV2D_UNROLL
    for (int c = 0; c < kWin; ++c) {
      const bool in = row_in && static_cast<unsigned>(j0 + c) < static_cast<unsigned>(out_w);
      win[r][c] = in ? g[(i0 + r) * out_w + j0 + c] : 0.0f;
    }
  }
CONV2D_UNROLL
  for (int a = 0; a < 2; ++a) {
CONV2D_UNROLL
    for (int b = 0; b < 2; ++b) {
      float sum = 0.0f;
CONV2D_UNROLL
      for (int p = 0; p < kK; ++p) {
        if ((a + kV + p) % 2 != 0) continue;
CONV2D_UNROLL
        for (int t = 0; t < kK; ++t) {
          if ((b + kV + t) % 2 != 0) continue;
          sum = fmaf(win[(a + kV - p) / 2 - kLo][(b + kV - t) / 2 - kLo], f[p * kK + t], sum);
        }
      }
      out[a][b] = sum;
    }
  }
}

}  // namespace depthwise_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_DGRAD_H_
