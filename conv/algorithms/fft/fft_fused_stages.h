// fft_fused's runner with its four stages callable one at a time, for the stage profiler in
// tools/lab (fft_fused_stage_times.h) and the tools that measure the stages. Not used by Run's
// callers: a stage on its own is launched without programmatic dependent launch.
#ifndef CONV2D_CONV_ALGORITHMS_FFT_FFT_FUSED_STAGES_H_
#define CONV2D_CONV_ALGORITHMS_FFT_FFT_FUSED_STAGES_H_

#include <memory>

#include "absl/status/statusor.h"
#include "conv/algorithms/fft/fft_fused_internal.h"
#include "conv/core/algorithm.h"

namespace conv2d {
namespace fft_fused {

class StagedRunner : public Runner {
 public:
  // One step of Run; Run is the four in order. in_run: launched right after the stage before it
  // (so that it may overlap its predecessor, pdl.cuh); false for a stage on its own.
  virtual absl::Status RunStage(Stage stage, const RunArgs& args, bool in_run) const = 0;
};

// A runner with explicit options on the current device. Needs a GPU.
absl::StatusOr<std::unique_ptr<StagedRunner>> CreateStagedRunner(const Shape& shape,
                                                                 const Options& options);

}  // namespace fft_fused
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_FFT_FFT_FUSED_STAGES_H_
