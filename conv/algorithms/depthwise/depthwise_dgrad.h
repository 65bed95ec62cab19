// "depthwise_dgrad": the data gradient of depthwise shapes (groups of one input channel, any
// channel multiplier) at stride > 1, by a gather: each dx pixel adds, for each tap that reaches
// it (transposed_dgrad.h's FoldAxis) and each output channel of its group, dy times that tap, in
// fp32 in a fixed order (rows, columns, then the multiplier's channels), plus its channel's zero
// term. One pass over dx (dx_pass.cuh), each pixel written once, dy read through the L1 (a
// quarter of dx at stride 2). What it replaces: the strided dgrad of the depthwise kernels by
// stride phases (transposed_dgrad.h), each phase a forward that reads all of dy and writes a
// workspace that a scatter reads back, for a handful of taps each (EfficientNet-B0's 3x3/2 at
// 112x112: four phases of 2x2, 2x1, 1x2 and 1x1 taps; 0.575 ms by fft_depthwise on an H100,
// cuDNN 0.492, PERF.md round 101). At stride 1 the depthwise forward on dy stays (3-5x cuDNN's
// on the nets' layers): this algorithm declines it.
#ifndef CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_DGRAD_H_
#define CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_DGRAD_H_

#include <cstdint>
#include <memory>

#include "conv/arch/host_device.h"
#include "conv/core/algorithm.h"
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

// dx[b, c, y, x] without its zero term: for each tap (p, t) that reaches (y, x), in tap order,
// and each of the group's `mult` output channels o = c*mult + k, dy[b, o, i, j] * w[o, 0, p, t].
// `m` is MakeFoldMap's of the dgrad; dy is [batch, Cin*mult, out_h, out_w].
template <typename T>
CONV2D_HOST_DEVICE_INLINE T DepthwiseDgradPixel(const FoldMap& m, int mult, const float* dy,
                                                const float* w, int64_t b, int64_t c,
                                                int64_t channels, int y, int x) {
  const int64_t plane = int64_t{m.out_h} * m.out_w, taps = int64_t{m.kh} * m.kw;
  const FoldRun r = FoldAxis(y, m.pt, m.kh, m.div_sh, m.dh, m.out_h, m.step_h, m.back_h);
  const FoldRun q = FoldAxis(x, m.pl, m.kw, m.div_sw, m.dw, m.out_w, m.step_w, m.back_w);
  const float* g = dy + (b * channels + c) * mult * plane;  // output channel c*mult
  const float* f = DepthwiseChannelFilter(w, c, mult, taps);
  T sum = 0;
  for (int a = r.k0; a <= r.k1; ++a) {
    const int p = r.first + m.step_h * a, i = r.out0 - m.back_h * a;
    for (int e = q.k0; e <= q.k1; ++e) {
      const int t = q.first + m.step_w * e, j = q.out0 - m.back_w * e;
      for (int k = 0; k < mult; ++k) {
        sum += static_cast<T>(g[k * plane + int64_t{i} * m.out_w + j]) *
               static_cast<T>(f[k * taps + p * m.kw + t]);
      }
    }
  }
  return sum;
}

}  // namespace depthwise_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_DGRAD_H_
