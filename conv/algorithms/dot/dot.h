// "dot": convolutions whose one output pixel sees the whole input image (Kh = H, Kw = W, no
// padding, any stride): each output is the dot product of a contiguous slice of x (the image's
// channels of one group) with a contiguous filter row, as in the squeeze-excite 1x1 layers on
// 1x1 images of EfficientNet and MobileNet and in K = H layers. The low-latency path: one launch,
// no workspace, the bias fused, the sum in fp32 (within the direct-summation contract). Their
// weight gradient too: each dw element a sum over the batch only, in double, db in the same
// launch.
#ifndef CONV2D_CONV_ALGORITHMS_DOT_DOT_H_
#define CONV2D_CONV_ALGORITHMS_DOT_DOT_H_

#include <memory>

#include "conv/core/algorithm.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeDot();

namespace dot_internal {

// Lanes that share one output: the smallest power of two of at least a quarter of the terms,
// 4 to 32, so that short dot products (8 to 48 channels) do not leave most of a warp idle.
int LanesPerOutput(int64_t terms);

}  // namespace dot_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DOT_DOT_H_
