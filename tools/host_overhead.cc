// Host time per call of the library's Run path, in microseconds: Plan::Run on a tiny problem and
// on KernelBot's case 1, enqueued behind a host function that holds the stream for 0.2 s, so that
// no call waits on the device (the host's enqueue cost alone, which is what a caller of a small
// problem waits on); and the pointer checks Run makes (ValidateTensors, ValidateDeviceAccess)
// alone. $CONV2D_GRAPHS=0 times the plain launches instead of the graphs
// (conv/arch/launch_graph.h). Needs a GPU.
//   host_overhead [--calls=N] [--algorithm=NAME]   (NAME: the library's or the lab's)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "conv/arch/launch_graph.h"
#include "conv/conv.h"
#include "conv/core/device_buffer.h"
#include "tools/lab/lab.h"

ABSL_FLAG(int, calls, 200, "calls timed per measurement (enqueued behind a 0.2 s hold)");
ABSL_FLAG(std::string, algorithm, "auto", "the algorithm of the plan whose Run is timed");

namespace conv2d {
namespace {

// The median over 5 repeats of the host time per call of `calls` calls of f, enqueued on the
// legacy stream behind a host function that holds it for 0.2 s.
template <typename F>
double MicrosPerCall(int calls, F&& f) {
  for (int i = 0; i < 20; ++i) f();  // warm-up
  cudaDeviceSynchronize();
  std::vector<double> times;
  for (int rep = 0; rep < 5; ++rep) {
    cudaLaunchHostFunc(
        nullptr, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); },
        nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    const auto t1 = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int Main() {
  // The lab's forced variants too (e.g. implicit_gemm_wgmma_split_kernel / _split_in_kernel).
  if (absl::Status lab = RegisterLabAlgorithms(); !lab.ok()) {
    std::fprintf(stderr, "%s\n", lab.ToString().c_str());
    return 1;
  }
  const int calls = absl::GetFlag(FLAGS_calls);
  bool ok = true;
  for (const Shape& s : {Shape{1, 8, 8, 16, 16, 3, 3}, Shape{4, 64, 64, 128, 128, 8, 8}}) {
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
    const double run = MicrosPerCall(calls, [&] {
      ok &= plan->Run(xp, wp, yp, ws->p, plan->workspace_bytes(), nullptr).ok();
    });
    const double checks = MicrosPerCall(calls, [&] {
      Tensors t;
      t.x = xp, t.w = wp, t.y = yp;
      ok &= ValidateTensors(s, t, ws->p, plan->workspace_bytes(), plan->workspace_bytes()).ok();
      ok &= ValidateDeviceAccess(plan->device(), t, ws->p).ok();
    });
    std::printf("host_overhead %s %s (%s launches): Plan::Run %.2f us/call (enqueue), its checks "
                "%.2f us%s\n",
                plan->algorithm().c_str(), s.ToString().c_str(),
                LaunchGraphs::Enabled() ? "graph" : "plain", run, checks,
                ok ? "" : "  (A CALL FAILED)");
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return conv2d::Main();
}
