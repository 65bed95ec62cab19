#include "tools/lab/fft_fused_stage_times.h"

#include <cuda_runtime.h>

#include <memory>

#include "conv/algorithms/fft/fft_fused_stages.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace fft_fused {
namespace {

struct DeviceMemory {
  void* p = nullptr;
  ~DeviceMemory() { cudaFree(p); }
};

}  // namespace

absl::StatusOr<StageTimes> TimeStages(const Shape& shape, const Options& options,
                                      int iterations) {
  ASSIGN_OR_RETURN(Config config, ChooseConfig(shape, options));
  ASSIGN_OR_RETURN(std::unique_ptr<StagedRunner> runner, CreateStagedRunner(shape, options));
  DeviceMemory x, w, y, ws;
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&x.p, 4 * shape.input_elements()), "cudaMalloc x"));
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&w.p, 4 * shape.filter_elements()), "cudaMalloc w"));
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&y.p, 4 * shape.output_elements()), "cudaMalloc y"));
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&ws.p, runner->workspace_bytes()), "cudaMalloc ws"));
  // 0x3c3c3c3c = 0.0115 in every element: finite, non-zero.
  RETURN_IF_ERROR(CudaStatus(cudaMemset(x.p, 0x3c, 4 * shape.input_elements()), "memset"));
  RETURN_IF_ERROR(CudaStatus(cudaMemset(w.p, 0x3c, 4 * shape.filter_elements()), "memset"));
  RunArgs a;
  a.x = static_cast<const float*>(x.p);
  a.w = static_cast<const float*>(w.p);
  a.y = static_cast<float*>(y.p);
  a.workspace = ws.p;
  a.workspace_bytes = runner->workspace_bytes();
  cudaEvent_t start = nullptr, stop = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&start), "cudaEventCreate"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&stop), "cudaEventCreate"));
  auto time = [&](int stage) -> absl::StatusOr<double> {
    for (int i = 0; i < iterations + 2; ++i) {
      if (i == 2) RETURN_IF_ERROR(CudaStatus(cudaEventRecord(start, a.stream), "record"));
      if (stage < kNumStages) {
        RETURN_IF_ERROR(runner->RunStage(static_cast<Stage>(stage), a, /*in_run=*/false));
      } else {
        RETURN_IF_ERROR(runner->Run(a));
      }
    }
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(stop, a.stream), "record"));
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(stop), "cudaEventSynchronize"));
    float ms = 0;
    RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, start, stop), "elapsed"));
    return 1e-3 * ms / iterations;
  };
  StageTimes t;
  absl::Status status = absl::OkStatus();
  for (int stage = 0; stage <= kNumStages && status.ok(); ++stage) {
    absl::StatusOr<double> s = time(stage);
    if (!s.ok()) {
      status = s.status();
    } else if (stage < kNumStages) {
      t.seconds[stage] = *s;
    } else {
      t.total_seconds = *s;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  RETURN_IF_ERROR(status);
  t.config = config;
  return t;
}

}  // namespace fft_fused
}  // namespace conv2d
