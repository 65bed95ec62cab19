// "autotune": the opt-in algorithm choice by measurement. For a shape it times every registered
// algorithm that implements it and is not reference-only (Plan::Create(shape, "autotune")), once
// per shape per process, and caches the winner. The timing follows the benchmark's protocol in
// miniature: seeded normal inputs (never zeros), one warm-up call, then the best of three calls
// timed with CUDA events, each after a write that evicts the inputs from L2.
#ifndef CONV2D_CONV_AUTOTUNE_H_
#define CONV2D_CONV_AUTOTUNE_H_

#include <string>

#include "absl/status/statusor.h"
#include "conv/shape.h"

namespace conv2d {

// The fastest algorithm for `shape` on the current device, measured the first time and cached.
absl::StatusOr<std::string> AutotuneAlgorithm(const Shape& shape);

}  // namespace conv2d

#endif  // CONV2D_CONV_AUTOTUNE_H_
