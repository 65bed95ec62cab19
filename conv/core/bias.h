// The bias for runners that do not add it in their own epilogue (Runner::adds_bias): one more
// pass over y, y[b, o, :, :] += bias[o]. Plan::Run and the testbed run every runner through
// RunWithBias, so that a bias is never left out.
#ifndef CONV2D_CONV_CORE_BIAS_H_
#define CONV2D_CONV_CORE_BIAS_H_

#include "absl/status/status.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

// Enqueues y += bias (per output channel) on `stream`.
absl::Status AddBias(const Shape& shape, const float* bias, float* y, cudaStream_t stream);

// runner.Run(args), then AddBias when the shape has a bias the runner does not add itself.
absl::Status RunWithBias(const Runner& runner, const Shape& shape, const RunArgs& args);

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_BIAS_H_
