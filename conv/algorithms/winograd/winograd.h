// "winograd": Winograd's minimal filtering F(4x4, 3x3) for 3x3 kernels: filter and input tiles
// transformed by our own kernels (every call), the 36 per-point channel mixes as one strided
// batch of cuBLAS fp64 GEMMs (the fp64 tensor cores; fp32 accumulation misses the accuracy bar
// here, winograd_internal.h says why), and the output transform writing the valid part of y.
// 4x fewer multiplies than direct convolution; the workspace holds the three transformed
// tensors in fp64.
#ifndef CONV2D_CONV_WINOGRAD_H_
#define CONV2D_CONV_WINOGRAD_H_

#include <memory>

#include "conv/core/algorithm.h"

namespace conv2d {
std::unique_ptr<Algorithm> MakeWinograd();
}  // namespace conv2d

#endif  // CONV2D_CONV_WINOGRAD_H_
