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

// Each thread computes kCols consecutive outputs of kRows(shape) consecutive rows of one plane.
constexpr int kCols = 4;
// The largest kernel side taken (RepLKNet's 31 and beyond).
constexpr int64_t kMaxKernel = 63;
// A CTA's threads are at most this many: several whole planes when they are small, one tile of
// a large plane otherwise.
constexpr int kMaxThreads = 256;

// How one shape is cut: a tile of tile_h x tile_w outputs of each of `planes` output planes per
// CTA, the input window each plane's tile reads (padding staged as zeros) and the shared memory
// it all takes.
struct Tiling {
  int rows_per_thread = 1;  // 4 at stride 1 and dilation 1 (an input row serves four outputs)
  int tile_h = 0, tile_w = 0;
  int tiles_h = 0, tiles_w = 0;
  int planes = 0;             // output planes per CTA
  int threads = 0;            // per CTA, a multiple of 32
  int in_rows = 0, in_cols = 0, pitch = 0;  // the staged window of one plane
  int filter_pitch = 0;       // kernel_w rounded up to 4 (16-byte rows)
  // Floats from one plane's window (in_rows x pitch) and filter (kernel_h x filter_pitch) to
  // the next's: padded so that the planes' and rows' loads fall on different banks.
  int plane_floats = 0, filter_floats = 0;
  int64_t smem_bytes = 0;
};
// Fails with ResourceExhausted when one plane's tile does not fit in `smem_limit` bytes.
absl::StatusOr<Tiling> TilingFor(const Shape& s, int64_t smem_limit);

}  // namespace depthwise_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_H_
