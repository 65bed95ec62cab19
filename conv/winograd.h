// "winograd": Winograd's minimal filtering F(4x4, 3x3) for 3x3 kernels: filter and input tiles
// transformed by our own kernels (every call), the 36 per-point channel mixes as one strided
// batch of cuBLAS fp32 GEMMs (pedantic math: FMA on the CUDA cores, no TF32), and the output
// transform writing the valid part of y. 2.25x fewer multiplies than direct convolution per
// output; the workspace holds the three transformed tensors (conv/winograd_internal.h).
#ifndef CONV2D_CONV_WINOGRAD_H_
#define CONV2D_CONV_WINOGRAD_H_

#include "conv/registry.h"

namespace conv2d {
void RegisterWinograd(Registry& registry);
}  // namespace conv2d

#endif  // CONV2D_CONV_WINOGRAD_H_
