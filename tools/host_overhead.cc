// Host time per call of the library's Run path, in microseconds: Plan::Run on a tiny problem
// (the GPU work is a few microseconds, so the host's enqueue cost is what a user waits on), and
// the pointer checks Run makes (ValidateRunArgs, ValidateNoOverlap, ValidateDeviceAccess) alone.
// Needs a GPU.
//   host_overhead [--calls=N] [--algorithm=NAME]   (NAME: the library's or the lab's)
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "conv/conv.h"
#include "conv/core/device_buffer.h"
#include "tools/lab/lab.h"

ABSL_FLAG(int, calls, 20000, "calls timed per measurement");
ABSL_FLAG(std::string, algorithm, "auto", "the algorithm of the plan whose Run is timed");

namespace conv2d {
namespace {

template <typename F>
double MicrosPerCall(int calls, F&& f) {
  for (int i = 0; i < calls / 10; ++i) f();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
}

int Main() {
  // The lab's forced variants too (e.g. implicit_gemm_wgmma_split_kernel / _split_in_kernel).
  if (absl::Status lab = RegisterLabAlgorithms(); !lab.ok()) {
    std::fprintf(stderr, "%s\n", lab.ToString().c_str());
    return 1;
  }
  const int calls = absl::GetFlag(FLAGS_calls);
  const Shape s{1, 8, 8, 16, 16, 3, 3};
  absl::StatusOr<Plan> plan = Plan::Create(s, absl::GetFlag(FLAGS_algorithm));
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", plan.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<DeviceBuffer> x = DeviceBuffer::Allocate(4 * s.input_elements());
  absl::StatusOr<DeviceBuffer> w = DeviceBuffer::Allocate(4 * s.filter_elements());
  absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Allocate(4 * s.output_elements());
  absl::StatusOr<DeviceBuffer> ws = DeviceBuffer::Allocate(plan->workspace_bytes());
  if (!x.ok() || !w.ok() || !y.ok() || !ws.ok()) return 1;
  const float* xp = x->as<const float>();
  const float* wp = w->as<const float>();
  float* yp = y->as<float>();
  bool ok = true;
  const double run = MicrosPerCall(calls, [&] {
    ok &= plan->Run(xp, wp, yp, ws->p, plan->workspace_bytes(), nullptr).ok();
  });
  cudaDeviceSynchronize();
  const double checks = MicrosPerCall(calls, [&] {
    ok &= ValidateRunArgs(xp, wp, yp, ws->p, plan->workspace_bytes(), plan->workspace_bytes())
              .ok();
    ok &= ValidateNoOverlap(s, xp, wp, yp, ws->p, plan->workspace_bytes()).ok();
    ok &= ValidateDeviceAccess(plan->device(), xp, wp, yp, ws->p).ok();
  });
  const double access = MicrosPerCall(calls, [&] {
    ok &= ValidateDeviceAccess(plan->device(), xp, wp, yp, ws->p).ok();
  });
  std::printf("host_overhead %s %s: Plan::Run %.2f us/call (enqueue), its checks %.2f us, of "
              "which ValidateDeviceAccess %.2f us%s\n",
              plan->algorithm().c_str(), s.ToString().c_str(), run, checks, access,
              ok ? "" : "  (A CALL FAILED)");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return conv2d::Main();
}
