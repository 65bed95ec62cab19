// The bias for runners that do not handle it themselves (Runner::adds_bias): in the forward one
// more pass over y, y[b, o, :, :] += bias[o]; in wgrad the bias gradient db[o] = the sum of
// dy[:, o, :, :]. Plan::Run and the testbed run every runner through RunWithBias, so that a bias
// is never left out.
#ifndef CONV2D_CONV_CORE_BIAS_H_
#define CONV2D_CONV_CORE_BIAS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

// Enqueues y += bias (per output channel) on `stream`.
absl::Status AddBias(const Shape& shape, const float* bias, float* y, cudaStream_t stream);

// Enqueues db[o] = sum of dy[:, o, :, :] on `stream`: in double, in an order fixed by the shape
// (bitwise reproducible).
absl::Status BiasGrad(const Shape& shape, const float* dy, float* db, cudaStream_t stream);

// The runs ChannelSums cuts each channel into: a function of the sizes alone.
int ChannelSumSplits(int64_t batch, int64_t channels, int64_t plane);
// Enqueues sums[c * splits + s] (splits = ChannelSumSplits(...)) = the sum of run s of channel
// c of t (batch, channels, plane), the channel's batch*plane elements in (b, i) order cut into
// equal runs, each in double in BiasGrad's fixed order; a channel's sum is its runs' sum in
// order (implicit_gemm_3xtf32's wgrad centring). With a gate, nothing is written where its
// gate_n values (on the device) are all zero.
absl::Status ChannelSums(const float* t, int64_t batch, int64_t channels, int64_t plane,
                         double* sums, cudaStream_t stream, const float* gate = nullptr,
                         int64_t gate_n = 0);

// runner.Run(args), then AddBias (fprop) or BiasGrad (wgrad) when the shape has a bias the
// runner does not handle itself.
absl::Status RunWithBias(const Runner& runner, const Shape& shape, const RunArgs& args);

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_BIAS_H_
