// The networks' depthwise layers (batch 32, NCHW): ConvNeXt-T's 7x7, EfficientNet-B0's 3x3 and
// 5x5 at stride 1 and 2, RepLKNet's 31x31 and a 13x13 on 7x7 planes, for the CPU tests of the
// forward's and the wgrad's tilings. Test-only.
#ifndef CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_LAYERS_H_
#define CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_LAYERS_H_

#include <cstdint>
#include <vector>

#include "conv/shape.h"
#include "conv/testing/shapes.h"

namespace conv2d {

// A square depthwise layer: batch b, c channels, hw x hw, k x k, pad, stride.
inline Shape DwLayer(int64_t b, int64_t c, int64_t hw, int64_t k, int64_t pad, int64_t stride) {
  return DepthwiseShape(b, c, 1, hw, hw, k, k, pad, stride);
}

inline std::vector<Shape> DepthwiseNetworkLayers() {
  return {DwLayer(32, 96, 56, 7, 3, 1),    DwLayer(32, 192, 28, 7, 3, 1),
          DwLayer(32, 384, 14, 7, 3, 1),   DwLayer(32, 768, 7, 7, 3, 1),
          DwLayer(32, 32, 112, 3, 1, 1),   DwLayer(32, 96, 112, 3, 1, 2),
          DwLayer(32, 144, 56, 3, 1, 1),   DwLayer(32, 144, 56, 5, 2, 2),
          DwLayer(32, 240, 28, 5, 2, 1),   DwLayer(32, 240, 28, 3, 1, 2),
          DwLayer(32, 480, 14, 3, 1, 1),   DwLayer(32, 480, 14, 5, 2, 1),
          DwLayer(32, 672, 14, 5, 2, 1),   DwLayer(32, 672, 14, 5, 2, 2),
          DwLayer(32, 1152, 7, 5, 2, 1),   DwLayer(32, 1152, 7, 3, 1, 1),
          DwLayer(32, 128, 56, 31, 15, 1), DwLayer(32, 1024, 7, 13, 6, 1)};
}

}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_LAYERS_H_
