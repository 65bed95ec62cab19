// The library's algorithms, as the registry sees them: one factory per algorithm.
#ifndef CONV2D_CONV_ALGORITHMS_BUILTIN_H_
#define CONV2D_CONV_ALGORITHMS_BUILTIN_H_

#include <vector>

#include "conv/core/algorithm.h"

namespace conv2d {

// In registration order, which is Algorithms()'s order and breaks ties between equal estimates.
const std::vector<AlgorithmFactory>& BuiltinAlgorithms();

}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_BUILTIN_H_
