// "direct": one thread per output element, fp64 accumulation. Obviously correct and slow: the GPU
// oracle for shapes too large for the CPU reference. Never chosen by "auto".
#ifndef CONV2D_CONV_DIRECT_H_
#define CONV2D_CONV_DIRECT_H_

#include "conv/core/registry.h"

namespace conv2d {
void RegisterDirect(Registry& registry);
}  // namespace conv2d

#endif  // CONV2D_CONV_DIRECT_H_
