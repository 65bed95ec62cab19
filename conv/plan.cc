// Plan creation and dispatch. Knows no algorithm by name: it loops over the registry.
#include <cuda_runtime_api.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "conv/algorithm.h"
#include "conv/autotune.h"
#include "conv/calibration.h"
#include "conv/conv.h"
#include "conv/registry.h"
#include "conv/status_macros.h"

namespace conv2d {

namespace {

absl::Status CheckDevice() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    // Clear the sticky error so later calls on this thread do not see it.
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: ",
        err == cudaSuccess ? "cudaGetDeviceCount found 0 devices" : cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> Algorithms() { return Registry::Global().Names(); }

absl::StatusOr<std::string> ChooseAlgorithm(const Shape& shape) {
  RETURN_IF_ERROR(ValidateShape(shape));
  const Algorithm* best = nullptr;
  double best_seconds = std::numeric_limits<double>::infinity();
  std::vector<std::string> reasons;
  for (const Algorithm* a : Registry::Global().All()) {
    absl::Status can = a->CanImplement(shape);
    if (!can.ok()) {
      reasons.push_back(absl::StrCat(a->name(), ": ", can.message()));
      continue;
    }
    double t = a->EstimateSeconds(shape) * CalibrationFactor(a->name());
    if (!std::isfinite(t)) {
      reasons.push_back(absl::StrCat(a->name(), ": reference only, never chosen automatically"));
    } else if (t < best_seconds) {
      best = a;
      best_seconds = t;
    }
  }
  if (best == nullptr) {
    return absl::UnimplementedError(absl::StrCat("no algorithm implements ", shape.ToString(),
                                                 ": ", absl::StrJoin(reasons, "; ")));
  }
  return best->name();
}

Plan::Plan(const Shape& shape, std::string algorithm, std::shared_ptr<const Runner> runner)
    : shape_(shape),
      algorithm_(std::move(algorithm)),
      runner_(std::move(runner)),
      workspace_bytes_(runner_->workspace_bytes()) {}

absl::StatusOr<Plan> Plan::Create(const Shape& shape, absl::string_view algorithm) {
  RETURN_IF_ERROR(ValidateShape(shape));
  std::string name(algorithm);
  if (name == "auto") {
    ASSIGN_OR_RETURN(name, ChooseAlgorithm(shape));
  } else if (name == "autotune") {
    RETURN_IF_ERROR(CheckDevice());
    ASSIGN_OR_RETURN(name, AutotuneAlgorithm(shape));
  }
  const Algorithm* a = Registry::Global().Find(name);
  if (a == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown algorithm '", name, "'; registered: auto, autotune, ",
                                            absl::StrJoin(Registry::Global().Names(), ", ")));
  }
  RETURN_IF_ERROR(a->CanImplement(shape));
  RETURN_IF_ERROR(CheckDevice());
  ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner, a->Initialize(shape));
  return Plan(shape, std::move(name), std::shared_ptr<const Runner>(std::move(runner)));
}

absl::Status ValidateRunArgs(const void* x, const void* w, const void* y, const void* workspace,
                             size_t workspace_bytes, size_t workspace_needed) {
  if (x == nullptr) return absl::InvalidArgumentError("input pointer x is null");
  if (w == nullptr) return absl::InvalidArgumentError("filter pointer w is null");
  if (y == nullptr) return absl::InvalidArgumentError("output pointer y is null");
  if (workspace_bytes < workspace_needed) {
    return absl::InvalidArgumentError(absl::StrCat("workspace too small: ", workspace_bytes,
                                                   " bytes given, ", workspace_needed,
                                                   " needed"));
  }
  if (workspace_needed > 0 && workspace == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("workspace pointer is null but ", workspace_needed, " bytes are needed"));
  }
  return absl::OkStatus();
}

absl::Status Plan::Run(const float* x, const float* w, float* y, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream) const {
  RETURN_IF_ERROR(
      ValidateRunArgs(x, w, y, workspace, workspace_bytes, runner_->workspace_bytes()));
  RunArgs args;
  args.x = x;
  args.w = w;
  args.y = y;
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  args.stream = stream;
  return runner_->Run(args);
}

}  // namespace conv2d
