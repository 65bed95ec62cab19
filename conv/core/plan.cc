// Plan creation and dispatch. Knows no algorithm by name: it loops over the registry.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "conv/arch/launch_graph.h"
#include "conv/core/algorithm.h"
#include "conv/core/bias.h"
#include "conv/core/cuda_status.h"
#include "conv/core/device_info.h"
#include "conv/core/autotune.h"
#include "conv/conv.h"
#include "conv/core/registry.h"
#include "conv/core/status_macros.h"

namespace conv2d {

namespace {

std::string Addr(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
}

// The algorithms that implement `shape` (validated) on `device` and may be chosen automatically,
// each with its proposal, fastest calibrated estimate first; or why there are none. No GPU work.
absl::StatusOr<std::vector<Candidate>> Rank(const Shape& shape, const DeviceInfo& device) {
  std::vector<std::pair<double, Candidate>> ranked;  // calibrated seconds, candidate
  std::vector<std::string> reasons;
  for (const Algorithm* a : Registry::Global().All()) {
    absl::StatusOr<Proposal> p = a->Propose(shape, device);
    if (!p.ok()) {
      reasons.push_back(absl::StrCat(a->name(), ": ", p.status().message()));
      continue;
    }
    const double t = p->estimated_seconds * a->calibration();
    if (!std::isfinite(t)) {
      reasons.push_back(absl::StrCat(a->name(), ": reference only, never chosen automatically"));
    } else {
      ranked.push_back({t, Candidate{a, *std::move(p)}});
    }
  }
  if (ranked.empty()) {
    return absl::UnimplementedError(absl::StrCat("no algorithm implements ", shape.ToString(),
                                                 ": ", absl::StrJoin(reasons, "; ")));
  }
  // Only algorithms within the accuracy contract on this shape, if any takes it.
  std::vector<std::pair<double, Candidate>> within;
  for (auto& r : ranked) {
    if (r.second.algorithm->MeetsContract(shape).ok()) within.push_back(std::move(r));
  }
  if (!within.empty()) ranked = std::move(within);
  // Stable: equal estimates keep registration order.
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Candidate> out;
  for (auto& r : ranked) out.push_back(std::move(r.second));
  return out;
}

// The current device's facts, or, without a GPU, the model device together with the error that
// Create returns once the shape's own errors (which need no GPU) have been reported.
struct Device {
  DeviceInfo info;
  absl::Status status;
};
Device CurrentDevice() {
  absl::StatusOr<DeviceInfo> d = DeviceInfo::Current();
  if (d.ok()) return Device{*std::move(d), absl::OkStatus()};
  return Device{DeviceInfo::ModelDevice(), d.status()};
}

}  // namespace

std::vector<std::string> Algorithms() { return Registry::Global().Names(); }

absl::StatusOr<std::string> ChooseAlgorithm(const Shape& shape) {
  RETURN_IF_ERROR(ValidateShape(shape));
  RETURN_IF_ERROR(Registry::Global().status());
  ASSIGN_OR_RETURN(std::vector<Candidate> ranked, Rank(shape, DeviceInfo::ModelDevice()));
  return ranked.front().algorithm->name();
}

namespace {

// The runner's kernels (and the bias pass, if the runner leaves it) on args.stream: recorded and
// enqueued through `graphs` where the runner records its launches (and graphs are on), else
// launched as it goes.
absl::Status Enqueue(const Runner& runner, const Shape& shape, LaunchGraphs& graphs,
                     const RunArgs& args) {
  if (runner.records_launches() && LaunchGraphs::Enabled()) {
    LaunchRecording recording(args.stream);
    const absl::Status st = RunWithBias(runner, shape, args);
    if (!recording.overflowed()) {
      return st.ok() ? CudaStatus(graphs.Launch(recording), "conv2d: enqueue") : st;
    }
  }  // a call with more launches than a recording holds: nothing was enqueued, so plainly
  return RunWithBias(runner, shape, args);
}

}  // namespace

struct Plan::RunState {
  std::mutex mutex;
  LaunchGraphs graphs;  // for runners that record their launches
};

Plan::Plan(const Shape& shape, std::string algorithm, std::shared_ptr<const Runner> runner,
           int device)
    : shape_(shape),
      algorithm_(std::move(algorithm)),
      runner_(std::move(runner)),
      run_state_(std::make_shared<RunState>()),
      workspace_bytes_(runner_->workspace_bytes()),
      device_(device) {}

absl::StatusOr<Plan> Plan::Create(const Shape& shape, absl::string_view algorithm) {
  RETURN_IF_ERROR(ValidateShape(shape));
  RETURN_IF_ERROR(Registry::Global().status());
  const Device device = CurrentDevice();
  if (algorithm == "auto" || algorithm == "autotune") {
    ASSIGN_OR_RETURN(std::vector<Candidate> ranked, Rank(shape, device.info));
    RETURN_IF_ERROR(device.status);
    if (algorithm == "autotune") {
      ASSIGN_OR_RETURN(Tuned tuned, Autotune(shape, device.info, ranked));
      return Plan(shape, tuned.algorithm->name(), std::move(tuned.runner), device.info.ordinal);
    }
    // An algorithm that cannot run on this GPU (FailedPrecondition from Initialize) passes the
    // choice to the next; any other error is the caller's.
    std::vector<std::string> refused;
    for (const Candidate& r : ranked) {
      absl::StatusOr<std::unique_ptr<Runner>> runner =
          r.algorithm->Initialize(shape, r.proposal, device.info);
      if (runner.ok()) {
        return Plan(shape, r.algorithm->name(), std::shared_ptr<const Runner>(*std::move(runner)),
                    device.info.ordinal);
      }
      if (runner.status().code() != absl::StatusCode::kFailedPrecondition) return runner.status();
      refused.push_back(std::string(runner.status().message()));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("no algorithm for ", shape.ToString(),
                     " runs on this device: ", absl::StrJoin(refused, "; ")));
  }
  const Algorithm* a = Registry::Global().Find(algorithm);
  if (a == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown algorithm '", algorithm,
                                            "'; registered: auto, autotune, ",
                                            absl::StrJoin(Registry::Global().Names(), ", ")));
  }
  ASSIGN_OR_RETURN(Proposal proposal, a->Propose(shape, device.info));
  RETURN_IF_ERROR(device.status);
  ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner, a->Initialize(shape, proposal, device.info));
  return Plan(shape, a->name(), std::shared_ptr<const Runner>(std::move(runner)),
              device.info.ordinal);
}

namespace {

// One role of a call: its name, pointer, size and whether the operation writes it.
struct Role {
  const char* name;
  const void* p;
  size_t bytes;
  bool written;
  bool used;  // by the shape's operation
  bool bias = false;  // the operation's bias role (fprop's bias, wgrad's db): used iff has_bias
};

// The seven roles of a call on `s` (Tensors' fields), with whether `s.op` uses each: the one
// table the checks below read.
std::array<Role, 8> RolesOf(const Shape& s, const Tensors& t) {
  const size_t x = static_cast<size_t>(s.input_elements()) * sizeof(float);
  const size_t w = static_cast<size_t>(s.filter_elements()) * sizeof(float);
  const size_t y = static_cast<size_t>(s.output_elements()) * sizeof(float);
  const size_t b = static_cast<size_t>(s.bias_elements()) * sizeof(float);
  const bool fprop = s.op == Op::kFprop, dgrad = s.op == Op::kDgrad, wgrad = s.op == Op::kWgrad;
  return {Role{"x", t.x, x, false, fprop || wgrad},
          {"w", t.w, w, false, fprop || dgrad},
          {"bias", t.bias, b, false, fprop && s.has_bias, fprop},
          {"y", t.y, y, true, fprop},
          {"dy", t.dy, y, false, dgrad || wgrad},
          {"dx", t.dx, x, true, dgrad},
          {"dw", t.dw, w, true, wgrad},
          {"db", t.db, b, true, wgrad && s.has_bias, wgrad}};
}

}  // namespace

absl::Status ValidateTensors(const Shape& s, const Tensors& t, const void* workspace,
                             size_t workspace_bytes, size_t workspace_needed) {
  // Fixed arrays: Run's checks are on the host's per-call path (no allocation).
  const std::array<Role, 8> roles = RolesOf(s, t);
  for (const Role& r : roles) {
    const bool bias_role = r.bias;
    if (r.used && r.p == nullptr) {
      return absl::InvalidArgumentError(
          bias_role ? absl::StrCat("the shape ", s.ToString(), " has a bias but the ", r.name,
                                   " pointer is null")
                    : absl::StrCat(r.name, " is null; ", OpName(s.op), " on ", s.ToString(),
                                   " needs it"));
    }
    if (!r.used && r.p != nullptr) {
      return absl::InvalidArgumentError(
          bias_role ? absl::StrCat("a bias was given (", r.name, ") but the shape ", s.ToString(),
                                   " has none; make the plan with has_bias = true")
                    : absl::StrCat(r.name, " was given but ", OpName(s.op), " on ",
                                   s.ToString(), " does not use it; pass null"));
    }
    // A misaligned pointer would fault the kernel and with it the caller's CUDA context.
    if (reinterpret_cast<uintptr_t>(r.p) % alignof(float) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(r.name, " (", Addr(r.p), ") is not aligned to ", alignof(float), " bytes"));
    }
  }
  if (workspace_bytes < workspace_needed) {
    return absl::InvalidArgumentError(absl::StrCat("workspace too small: ", workspace_bytes,
                                                   " bytes given, ", workspace_needed,
                                                   " needed"));
  }
  if (workspace_needed > 0 && workspace == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("workspace pointer is null but ", workspace_needed, " bytes are needed"));
  }
  std::array<Role, 9> ranges;
  size_t n = 0;
  for (const Role& r : roles) {
    if (r.used) ranges[n++] = r;
  }
  if (workspace != nullptr && workspace_needed > 0) {
    ranges[n++] = Role{"the workspace", workspace, workspace_needed, true, true};
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      const Role& a = ranges[i];
      const Role& b = ranges[j];
      const uintptr_t a0 = reinterpret_cast<uintptr_t>(a.p), b0 = reinterpret_cast<uintptr_t>(b.p);
      if ((a.written || b.written) && a0 < b0 + b.bytes && b0 < a0 + a.bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            a.name, " and ", b.name, " overlap; ", a.written ? a.name : b.name,
            " is written while the other is in use, which would give a wrong result"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDeviceAccess(int device, const Tensors& t, const void* workspace) {
  int current = -1;
  cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no current CUDA device: ", cudaGetErrorString(err)));
  }
  if (current != device) {
    return absl::FailedPreconditionError(
        absl::StrCat("the plan was made for CUDA device ", device, " but device ", current,
                     " is current; make it current (cudaSetDevice) or make a plan for it"));
  }
  const std::pair<const char*, const void*> buffers[] = {
      {"x", t.x},   {"w", t.w},   {"bias", t.bias}, {"y", t.y}, {"dy", t.dy},
      {"dx", t.dx}, {"dw", t.dw}, {"db", t.db},     {"the workspace", workspace}};
  for (const auto& [name, p] : buffers) {
    if (p == nullptr) continue;  // a role the operation does not use, or no workspace
    cudaPointerAttributes a;
    err = cudaPointerGetAttributes(&a, p);
    if (err != cudaSuccess) {
      cudaGetLastError();  // not sticky, but clear it for the caller's next check
      return absl::InvalidArgumentError(absl::StrCat(name, " (", Addr(p),
                                                     ") is not memory CUDA knows: ",
                                                     cudaGetErrorString(err)));
    }
    switch (a.type) {
      case cudaMemoryTypeManaged:
        break;
      case cudaMemoryTypeDevice:
        if (a.device != device) {
          return absl::InvalidArgumentError(absl::StrCat(
              name, " is memory of CUDA device ", a.device, "; the plan runs on device ", device));
        }
        break;
      case cudaMemoryTypeHost:
        if (a.devicePointer != p) {
          return absl::InvalidArgumentError(absl::StrCat(
              name, " is pinned host memory not mapped at the same address on the device; pass "
              "device memory"));
        }
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(name, " (", Addr(p),
                         ") is host memory the GPU cannot read (pageable); pass device memory"));
    }
  }
  return absl::OkStatus();
}

absl::Status Plan::Run(const float* x, const float* w, const float* bias, float* y,
                       void* workspace, size_t workspace_bytes, cudaStream_t stream) const {
  Tensors t;
  t.x = x;
  t.w = w;
  t.bias = bias;
  t.y = y;
  return Run(t, workspace, workspace_bytes, stream);
}

absl::Status Plan::Run(const Tensors& t, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream) const {
  const size_t needed = runner_->workspace_bytes();
  RETURN_IF_ERROR(ValidateTensors(shape_, t, workspace, workspace_bytes, needed));
  RETURN_IF_ERROR(ValidateDeviceAccess(device_, t, needed > 0 ? workspace : nullptr));
  RunArgs args;
  static_cast<Tensors&>(args) = t;
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  args.stream = stream;
  // A runner rebinds its cuFFT/cuBLAS handles to each call's stream and workspace before it
  // enqueues, and the graphs are updated with each call's arguments; two threads interleaving
  // that on one plan (or its copies) could run one call's work with the other's. Enqueueing is
  // host-side and short, so serialize it.
  std::lock_guard<std::mutex> lock(run_state_->mutex);
  const absl::Status st = Enqueue(*runner_, shape_, run_state_->graphs, args);
  // A failed launch leaves its error as the thread's last CUDA error, where a later check of
  // an unrelated launch would find it.
  if (!st.ok()) cudaGetLastError();
  return st;
}

}  // namespace conv2d
