// The measurements behind cgemm_3xtf32's kAuto kernel choice (AutoTakesWgmma): for every shape of
// the two benchmark suites, fft_fused_3xtf32 planned and timed once with each channel-mix kernel
// (mma.sync, wgmma), stage by stage (fft_fused::TimeStages: warm L2, back-to-back calls), beside
// the planner's estimate of the mix. Needs an sm_90 GPU.
//   mix_kernels [--iterations=N] [--suite=all|kernelbot|cnn] [--tile=HxW] [--pairs=P]
// --tile and --pairs override the planner (fft_fused::Options) on every shape, to time the stages
// of tiles it would not pick; a shape the forced tile cannot serve prints an ERROR line.
// Prints one line per (shape, kernel); docs/PERF.md keeps the tables it printed.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "conv/algorithms/fft/cgemm_3xtf32.h"
#include "conv/algorithms/fft/cgemm_3xtf32_sm90.h"
#include "conv/algorithms/fft/fft_fused_internal.h"
#include "tools/lab/fft_fused_stage_times.h"
#include "conv/core/registry.h"
#include "conv/testing/shapes.h"

namespace conv2d {
namespace {

int Main(int argc, char** argv) {
  int iterations = 20;
  int64_t tile_h = 0, tile_w = 0;
  int pairs = 0;
  std::string suite = "all";
  for (int i = 1; i < argc; ++i) {
    const char* value = std::strchr(argv[i], '=');
    if (std::strncmp(argv[i], "--iterations=", 13) == 0 && value != nullptr &&
        absl::SimpleAtoi(value + 1, &iterations) && iterations > 0) {
      continue;
    }
    if (std::strncmp(argv[i], "--tile=", 7) == 0 && value != nullptr) {
      const std::vector<std::string> hw = absl::StrSplit(value + 1, 'x');
      if (hw.size() == 2 && absl::SimpleAtoi(hw[0], &tile_h) && absl::SimpleAtoi(hw[1], &tile_w) &&
          tile_h > 0 && tile_w > 0) {
        continue;
      }
    }
    if (std::strncmp(argv[i], "--suite=", 8) == 0 && value != nullptr &&
        (std::strcmp(value + 1, "all") == 0 || std::strcmp(value + 1, "kernelbot") == 0 ||
         std::strcmp(value + 1, "cnn") == 0)) {
      suite = value + 1;
      continue;
    }
    if (std::strncmp(argv[i], "--pairs=", 8) == 0 && value != nullptr &&
        absl::SimpleAtoi(value + 1, &pairs) && pairs > 0) {
      continue;
    }
    std::fprintf(stderr,
                 "usage: mix_kernels [--iterations=N] [--suite=all|kernelbot|cnn] [--tile=HxW] "
                 "[--pairs=P]   (bad argument '%s')\n",
                 argv[i]);
    return 2;
  }
  // The registered variant these runs are planned like (Options{gemm_3xtf32} + the kernel).
  if (Registry::Global().Find("fft_fused_3xtf32") == nullptr) {
    std::fprintf(stderr, "mix_kernels: fft_fused_3xtf32 is not registered\n");
    return 1;
  }
  if (!CgemmSm90Supported()) {
    std::fprintf(stderr, "mix_kernels: needs a compute capability 9.0 GPU (wgmma); none found\n");
    return 1;
  }
  std::vector<Shape> shapes;
  if (suite != "cnn") {
    shapes = KernelBotBenchmarkShapes();
    shapes.erase(shapes.begin() + 3);  // KernelBot's case 4 repeats case 3
  }
  if (suite != "kernelbot") {
    for (const Shape& s : CnnShapes()) shapes.push_back(s);
  }
  std::printf("%-34s %-8s %9s %5s %5s %5s %6s %9s %9s %9s %9s %9s %9s %9s %9s\n", "shape", "mix",
              "tile", "m", "n", "k", "f", "mix_ms", "model_ms", "fft_ms", "total_ms",
              "planned_ms", "filter_ms", "input_ms", "inverse_ms");
  int failures = 0;
  for (const Shape& s : shapes) {
    for (CgemmKernel kernel : {CgemmKernel::kMmaSync, CgemmKernel::kWgmma}) {
      fft_fused::Options o;
      o.gemm_3xtf32 = true;
      o.mix_kernel = kernel;
      o.tile_h = tile_h;
      o.tile_w = tile_w;
      o.pairs_per_cta = pairs;
      const absl::StatusOr<fft_fused::StageTimes> t = fft_fused::TimeStages(s, o, iterations);
      const char* name = kernel == CgemmKernel::kWgmma ? "wgmma" : "mma.sync";
      if (!t.ok()) {
        std::printf("%-34s %-8s ERROR %s\n", s.ToString().c_str(), name,
                    std::string(t.status().message()).c_str());
        ++failures;
        continue;
      }
      const fft_fused::Geometry& g = t->config.geometry;
      const fft_tiled::GemmLayout l = fft_tiled::ChannelMixLayout(s, g);
      const double fft = t->seconds[fft_fused::kFilterStage] +
                         t->seconds[fft_fused::kInputStage] +
                         t->seconds[fft_fused::kInverseStage];
      std::printf("%-34s %-8s %9s %5d %5d %5d %6d %9.4f %9.4f %9.4f %9.4f %9.4f"
                  " %9.4f %9.4f %9.4f\n",
                  s.ToString().c_str(), name, absl::StrCat(g.tile_h, "x", g.tile_w).c_str(), l.m,
                  l.n, l.k, l.batch, 1e3 * t->seconds[fft_fused::kMixStage],
                  1e3 * t->config.cost.gemm_seconds, 1e3 * fft, 1e3 * t->total_seconds,
                  1e3 * t->config.cost.seconds, 1e3 * t->seconds[fft_fused::kFilterStage],
                  1e3 * t->seconds[fft_fused::kInputStage],
                  1e3 * t->seconds[fft_fused::kInverseStage]);
      std::fflush(stdout);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) { return conv2d::Main(argc, argv); }
