// The measurements behind fft_fused's tile choice: for each shape of both benchmark suites that
// fft_fused_3xtf32 can win (kernels of 5 and more), every tile and CTA size the planner may pick,
// timed under the KernelBot protocol (256 MB L2 flush, events around one call, mean of N calls)
// beside the planner's estimate, with the planner's own pick marked. Needs an sm_90 GPU.
//   fft_tiles [--calls=N]
#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "conv/algorithms/fft/fft_fused_internal.h"
#include "conv/core/algorithm.h"
#include "conv/core/cuda_status.h"
#include "conv/core/device_buffer.h"
#include "conv/core/registry.h"
#include "conv/core/status_macros.h"
#include "conv/core/timing.h"
#include "conv/testing/shapes.h"

ABSL_FLAG(int, calls, 20, "timed calls per configuration, after two warm-up calls; the mean");

namespace conv2d {
namespace {

absl::Status Run(int calls) {
  if (Registry::Global().Find("fft_fused_3xtf32") == nullptr) {
    return absl::FailedPreconditionError("fft_fused_3xtf32 is not registered");
  }
  std::vector<Shape> shapes = KernelBotBenchmarkShapes();
  shapes.erase(shapes.begin() + 3);  // KernelBot's case 4 repeats case 3
  for (const Shape& s : CnnShapes()) {
    if (s.kernel_h >= 5) shapes.push_back(s);
  }
  ASSIGN_OR_RETURN(KernelBotTimer timer, KernelBotTimer::Create());
  std::printf("%-34s %7s %5s %9s %9s %9s  %s\n", "shape", "tile", "pairs", "ws_MB", "model_ms",
              "ms", "");
  for (const Shape& s : shapes) {
    fft_fused::Options planned;
    planned.gemm_3xtf32 = true;
    const absl::StatusOr<fft_fused::Config> pick = fft_fused::ChooseConfig(s, planned);
    if (!pick.ok()) continue;
    ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(4 * s.input_elements(), "x"));
    ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Allocate(4 * s.filter_elements(), "w"));
    ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Allocate(4 * s.output_elements(), "y"));
    // Not zeros: every float 0x3c3c3c3c (~0.0115), so that the tensor cores' power draw is not
    // that of zeros. Only times are taken.
    RETURN_IF_ERROR(CudaStatus(cudaMemset(x.p, 0x3c, 4 * s.input_elements()), "memset x"));
    RETURN_IF_ERROR(CudaStatus(cudaMemset(w.p, 0x3c, 4 * s.filter_elements()), "memset w"));
    for (int64_t th : fft_fused::TileSizeCandidates(s.kernel_h, s.height)) {
      for (int64_t tw : fft_fused::TileSizeCandidates(s.kernel_w, s.width)) {
        for (int pairs : {1, 2, 4, 8}) {
          fft_fused::Options o = planned;
          o.tile_h = th;
          o.tile_w = tw;
          o.pairs_per_cta = pairs;
          const absl::StatusOr<fft_fused::Config> c = fft_fused::ChooseConfig(s, o);
          if (!c.ok() || c->workspace.total_bytes > (size_t{1} << 30)) continue;
          absl::StatusOr<std::unique_ptr<Runner>> r = fft_fused::CreateRunner(s, o);
          if (!r.ok()) continue;
          ASSIGN_OR_RETURN(DeviceBuffer ws,
                           DeviceBuffer::Allocate((*r)->workspace_bytes() + 1, "workspace"));
          RunArgs a;
          a.x = x.as<float>();
          a.w = w.as<float>();
          a.y = y.as<float>();
          a.workspace = ws.p;
          a.workspace_bytes = (*r)->workspace_bytes();
          // An error ends the run: a CUDA error would spoil every later time.
          ASSIGN_OR_RETURN(CallTimes t,
                           timer.Time([&](cudaStream_t) { return (*r)->Run(a); }, a.stream,
                                      calls, /*warmup=*/2));
          const bool picked = pick->geometry.tile_h == th && pick->geometry.tile_w == tw &&
                              pick->smem.pairs == c->smem.pairs;
          std::printf("%-34s %7s %5d %9.1f %9.4f %9.4f  %s\n", s.ToString().c_str(),
                      absl::StrCat(th, "x", tw).c_str(), c->smem.pairs,
                      c->workspace.total_bytes / 1048576.0, 1e3 * c->cost.seconds, t.mean_ms(),
                      picked ? "<- planner" : "");
          std::fflush(stdout);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("fft_fused_3xtf32's tile and CTA sizes, timed. fft_tiles [--calls=N]");
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const int calls = absl::GetFlag(FLAGS_calls);
  if (positional.size() > 1 || calls < 1) {
    std::fprintf(stderr, "usage: fft_tiles [--calls=N], N >= 1\n");
    return 2;
  }
  const absl::Status st = conv2d::Run(calls);
  if (!st.ok()) {
    std::fprintf(stderr, "fft_tiles: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
