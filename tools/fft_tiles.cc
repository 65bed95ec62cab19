// The measurements behind fft_fused's tile choice: for each shape of both benchmark suites that
// fft_fused_3xtf32 can win (kernels of 5 and more), every tile and CTA size the planner may pick,
// timed under the KernelBot protocol (256 MB L2 flush, events around one call, mean of N calls)
// beside the planner's estimate, with the planner's own pick marked. Needs an sm_90 GPU.
//   fft_tiles [--calls=N]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "conv/core/algorithm.h"
#include "conv/algorithms/fft/fft_fused_internal.h"
#include "conv/core/registry.h"
#include "conv/testing/shapes.h"

namespace conv2d {
namespace {

constexpr size_t kFlushBytes = size_t{256} << 20;

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "fft_tiles: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Mean ms of `calls` KernelBot-timed calls (after two warm-up calls); < 0 on an error.
double TimeCalls(const Runner& r, const RunArgs& a, void* flush, int calls) {
  cudaEvent_t start, stop;
  if (!Ok(cudaEventCreate(&start), "event") || !Ok(cudaEventCreate(&stop), "event")) return -1;
  double total = 0;
  for (int i = -2; i < calls; ++i) {
    if (!Ok(cudaMemsetAsync(flush, 0, kFlushBytes, a.stream), "flush")) return -1;
    cudaEventRecord(start, a.stream);
    const absl::Status st = r.Run(a);
    if (!st.ok()) {
      std::fprintf(stderr, "fft_tiles: %s\n", std::string(st.message()).c_str());
      return -1;
    }
    cudaEventRecord(stop, a.stream);
    if (!Ok(cudaEventSynchronize(stop), "sync")) return -1;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i >= 0) total += ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return total / calls;
}

int Main(int argc, char** argv) {
  int calls = 20;
  for (int i = 1; i < argc; ++i) {
    const char* value = std::strchr(argv[i], '=');
    if (std::strncmp(argv[i], "--calls=", 8) == 0 && value != nullptr &&
        absl::SimpleAtoi(value + 1, &calls) && calls > 0) {
      continue;
    }
    std::fprintf(stderr, "usage: fft_tiles [--calls=N]   (bad argument '%s')\n", argv[i]);
    return 2;
  }
  if (Registry::Global().Find("fft_fused_3xtf32") == nullptr) {
    std::fprintf(stderr, "fft_tiles: fft_fused_3xtf32 is not registered\n");
    return 1;
  }
  std::vector<Shape> shapes = KernelBotBenchmarkShapes();
  shapes.erase(shapes.begin() + 3);  // KernelBot's case 4 repeats case 3
  for (const Shape& s : CnnShapes()) {
    if (s.kernel_h >= 5) shapes.push_back(s);
  }
  void* flush = nullptr;
  if (!Ok(cudaMalloc(&flush, kFlushBytes), "cudaMalloc")) return 1;
  std::printf("%-34s %7s %5s %9s %9s %9s  %s\n", "shape", "tile", "pairs", "ws_MB", "model_ms",
              "ms", "");
  for (const Shape& s : shapes) {
    fft_fused::Options planned;
    planned.gemm_3xtf32 = true;
    const absl::StatusOr<fft_fused::Config> pick = fft_fused::ChooseConfig(s, planned);
    if (!pick.ok()) continue;
    float *x = nullptr, *w = nullptr, *y = nullptr;
    if (!Ok(cudaMalloc(&x, 4 * s.input_elements()), "x") ||
        !Ok(cudaMalloc(&w, 4 * s.filter_elements()), "w") ||
        !Ok(cudaMalloc(&y, 4 * s.output_elements()), "y")) {
      return 1;
    }
    // Not zeros: every float 0x3c3c3c3c (~0.0115), so that the tensor cores' power draw is not
    // that of zeros. Only times are taken.
    cudaMemset(x, 0x3c, 4 * s.input_elements());
    cudaMemset(w, 0x3c, 4 * s.filter_elements());
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
          void* ws = nullptr;
          if (!Ok(cudaMalloc(&ws, (*r)->workspace_bytes() + 1), "workspace")) return 1;
          RunArgs a{x, w, y, ws, (*r)->workspace_bytes(), nullptr};
          const double ms = TimeCalls(**r, a, flush, calls);
          cudaFree(ws);
          if (ms < 0) return 1;  // the error is printed; a CUDA error would spoil every later time
          const bool picked = pick->geometry.tile_h == th && pick->geometry.tile_w == tw &&
                              pick->smem.pairs == c->smem.pairs;
          std::printf("%-34s %7s %5d %9.1f %9.4f %9.4f  %s\n", s.ToString().c_str(),
                      absl::StrCat(th, "x", tw).c_str(), c->smem.pairs,
                      c->workspace.total_bytes / 1048576.0, 1e3 * c->cost.seconds, ms,
                      picked ? "<- planner" : "");
          std::fflush(stdout);
        }
      }
    }
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
  }
  return 0;
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) { return conv2d::Main(argc, argv); }
