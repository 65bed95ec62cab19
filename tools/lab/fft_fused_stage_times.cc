#include "tools/lab/fft_fused_stage_times.h"

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "conv/algorithms/fft/fft_fused_stages.h"
#include "conv/core/cuda_status.h"
#include "conv/core/device_buffer.h"
#include "conv/core/status_macros.h"
#include "conv/core/timing.h"
#include "reference/random.h"

namespace conv2d {
namespace fft_fused {
absl::StatusOr<StageTimes> TimeStages(const Shape& shape, const Options& options,
                                      int iterations) {
  ASSIGN_OR_RETURN(Config config, ChooseConfig(shape, options));
  ASSIGN_OR_RETURN(std::unique_ptr<StagedRunner> runner, CreateStagedRunner(shape, options));
  ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(4 * shape.input_elements(), "x"));
  ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Allocate(4 * shape.filter_elements(), "w"));
  ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Allocate(4 * shape.output_elements(), "y"));
  ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::Allocate(runner->workspace_bytes(), "ws"));
  // randn, as the benchmark draws: a constant would send every x tile through the FFT's
  // cleaning (its mean is large), which ordinary data never takes.
  const std::vector<float> hx =
      RandomTensor(1, kInputTensor, shape.input_elements(), Distribution::kNormal);
  const std::vector<float> hw =
      RandomTensor(1, kFilterTensor, shape.filter_elements(), Distribution::kNormal);
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(x.p, hx.data(), 4 * hx.size(), cudaMemcpyHostToDevice),
                             "copy x"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(w.p, hw.data(), 4 * hw.size(), cudaMemcpyHostToDevice),
                             "copy w"));
  RunArgs a;
  a.x = x.as<const float>();
  a.w = w.as<const float>();
  a.y = y.as<float>();
  a.workspace = ws.p;
  a.workspace_bytes = runner->workspace_bytes();
  StageTimes t;
  t.config = config;
  for (int stage = 0; stage <= kNumStages; ++stage) {
    const TimedCall call = [&](cudaStream_t) {
      return stage < kNumStages ? runner->RunStage(static_cast<Stage>(stage), a, /*in_run=*/false)
                                : runner->Run(a);
    };
    ASSIGN_OR_RETURN(double ms, TimeBackToBack(call, a.stream, iterations));
    (stage < kNumStages ? t.seconds[stage] : t.total_seconds) = 1e-3 * ms;
  }
  return t;
}

}  // namespace fft_fused
}  // namespace conv2d
