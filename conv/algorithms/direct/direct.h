// "direct": one thread per output element, fp64 accumulation. Obviously correct and slow: the GPU
// oracle for shapes too large for the CPU reference. Never chosen by "auto".
#ifndef CONV2D_CONV_DIRECT_H_
#define CONV2D_CONV_DIRECT_H_

#include <memory>

#include "conv/core/algorithm.h"

namespace conv2d {
std::unique_ptr<Algorithm> MakeDirect();
}  // namespace conv2d

#endif  // CONV2D_CONV_DIRECT_H_
