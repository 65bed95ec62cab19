// "depthwise": the convolution of each input channel with its own filters (in_channels / groups
// = 1: depthwise, with any channel multiplier Cout / groups), as MobileNet, EfficientNet and
// ConvNeXt use it, with padding, stride, dilation and the bias fused. A direct kernel on CUDA
// cores: there is no channel reduction to make a GEMM of, so each output is Kh*Kw terms summed
// in fp32 from a shared-memory tile of its input plane.
#ifndef CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_H_
#define CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_H_

#include <cstdint>
#include <memory>

#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeDepthwise();

namespace depthwise_internal {

// A CTA computes a kTileH x kTileW block of one output plane (b, o); each of its threads
// kOutputsPerThread consecutive outputs of one row.
constexpr int kTileW = 32;
constexpr int kTileH = 16;
constexpr int kOutputsPerThread = 4;
constexpr int kThreads = kTileW / kOutputsPerThread * kTileH;  // 128
// The largest kernel side taken (RepLKNet's 31 and beyond).
constexpr int64_t kMaxKernel = 63;

// The input tile a CTA stages (its outputs' windows, padding included as zeros) and the shared
// memory it takes with the filter.
struct TileGeometry {
  int in_rows = 0, in_cols = 0, in_pitch = 0;
  int64_t smem_bytes = 0;
};
TileGeometry TileFor(const Shape& s);

}  // namespace depthwise_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_H_
