// The networks' depthwise layers (batch 32, NCHW): ConvNeXt-T's 7x7, EfficientNet-B0's 3x3 and
// 5x5 at stride 1 and 2, RepLKNet's 31x31 and a 13x13 on 7x7 planes, for the CPU tests of the
// forward's and the wgrad's tilings; depthwise_dgrad's shapes. Test-only.
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

// depthwise_dgrad's shapes (strided dgrads), for its CPU and GPU tests: EfficientNet-B0's four
// strided layers at batch `b` (scaled down in channels), and odd geometries: stride 3 with
// remainders and H != W, K = 1 (rows no tap reaches), K = H (one output pixel), multipliers 2 and
// 3, dilation with stride, asymmetric padding with a stride and a dilation per axis; and for the
// block kernel odd sizes at stride 2, both paddings' parities, asymmetric padding.
inline std::vector<Shape> DepthwiseDgradShapes(int64_t b) {
  std::vector<Shape> v = {
      DwLayer(b, 6, 112, 3, 1, 2),  DwLayer(b, 8, 56, 5, 2, 2),
      DwLayer(b, 9, 28, 3, 1, 2),   DwLayer(b, 7, 14, 5, 2, 2),
      DepthwiseShape(2, 5, 1, 26, 31, 3, 3, 1, 3),
      DepthwiseShape(1, 3, 1, 9, 9, 1, 1, 0, 2),
      DepthwiseShape(2, 4, 1, 7, 7, 7, 7, 0, 2),
      DepthwiseShape(2, 6, 2, 17, 23, 5, 5, 2, 2),
      DepthwiseShape(1, 3, 3, 21, 20, 3, 3, 1, 2),
      DepthwiseShape(2, 4, 1, 19, 21, 3, 3, 2, 2, 2),
      // The block kernel's (stride 2, one channel a group, 3, 5, 7): odd sizes, both paddings'
      // parities.
      DepthwiseShape(2, 5, 1, 13, 11, 3, 3, 0, 2),
      DepthwiseShape(2, 3, 1, 15, 9, 5, 5, 1, 2),
      DepthwiseShape(1, 4, 1, 20, 17, 7, 7, 3, 2),
  };
  Shape asym = DepthwiseShape(2, 3, 1, 15, 16, 3, 4, 0, 1);
  asym.pad_top = 2, asym.pad_bottom = 0, asym.pad_left = 1, asym.pad_right = 3;
  asym.stride_h = 2, asym.stride_w = 3, asym.dilation_h = 3;
  v.push_back(asym);
  Shape blocks = DepthwiseShape(2, 3, 1, 14, 13, 3, 3, 0, 2);  // asymmetric, the block kernel's
  blocks.pad_top = 2, blocks.pad_bottom = 1, blocks.pad_left = 0, blocks.pad_right = 3;
  v.push_back(blocks);
  for (Shape& s : v) s.op = Op::kDgrad;
  return v;
}

}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_LAYERS_H_
