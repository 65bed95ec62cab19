// fft_fused's stages timed one by one: the data behind its cost model (EstimateCost in
// conv/algorithms/fft/fft_fused_plan.cc) and tools/mix_kernels. Measurement only: not in
// libconv2d.so.
#ifndef CONV2D_TOOLS_LAB_FFT_FUSED_STAGE_TIMES_H_
#define CONV2D_TOOLS_LAB_FFT_FUSED_STAGE_TIMES_H_

#include "absl/status/statusor.h"
#include "conv/algorithms/fft/fft_fused_internal.h"
#include "conv/shape.h"

namespace conv2d {
namespace fft_fused {

// Mean seconds per call of each step run alone back to back, and of the whole Run, over
// `iterations` calls after two warm-up calls, on the default stream, L2 not flushed (so the
// small cases read inputs from L2). Needs a GPU.
struct StageTimes {
  Config config;
  double seconds[kNumStages] = {};
  double total_seconds = 0;
};
absl::StatusOr<StageTimes> TimeStages(const Shape& shape, const Options& options,
                                      int iterations);

}  // namespace fft_fused
}  // namespace conv2d

#endif  // CONV2D_TOOLS_LAB_FFT_FUSED_STAGE_TIMES_H_
