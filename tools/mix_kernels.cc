// The measurements behind cgemm_3xtf32's kAuto kernel choice (AutoTakesWgmma): for every shape of
// the two benchmark suites, fft_fused_3xtf32 planned and timed once with each channel-mix kernel
// (mma.sync, wgmma), stage by stage (fft_fused::TimeStages: warm L2, back-to-back calls), beside
// the planner's estimate of the mix. Needs an sm_90 GPU.
//   mix_kernels [--iterations=N] [--suite=all|kernelbot|cnn] [--tile=HxW] [--pairs=P]
// --tile and --pairs override the planner (fft_fused::Options) on every shape, to time the stages
// of tiles it would not pick; a shape the forced tile cannot serve prints an ERROR line.
// Prints one line per (shape, kernel); docs/PERF.md keeps the tables it printed.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
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

// --tile=HxW; empty (the default, 0x0) leaves the tile to the planner.
struct Tile {
  int64_t h = 0, w = 0;
};

bool AbslParseFlag(absl::string_view text, Tile* tile, std::string* error) {
  if (text.empty()) {
    *tile = Tile();
    return true;
  }
  const std::vector<std::string> hw = absl::StrSplit(text, 'x');
  if (hw.size() == 2 && absl::SimpleAtoi(hw[0], &tile->h) && absl::SimpleAtoi(hw[1], &tile->w) &&
      tile->h > 0 && tile->w > 0) {
    return true;
  }
  *error = "wants HxW, both > 0";
  return false;
}

std::string AbslUnparseFlag(const Tile& tile) {
  return tile.h > 0 ? absl::StrCat(tile.h, "x", tile.w) : "";
}

}  // namespace
}  // namespace conv2d

ABSL_FLAG(int, iterations, 20, "back-to-back calls per stage");
ABSL_FLAG(std::string, suite, "all", "all|kernelbot|cnn: the shapes");
ABSL_FLAG(conv2d::Tile, tile, {}, "HxW: this tile on every shape instead of the planner's");
ABSL_FLAG(std::optional<int>, pairs, std::nullopt,
          "P: this many pairs per CTA on every shape instead of the planner's");

namespace conv2d {
namespace {

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fft_fused_3xtf32 stage by stage with each channel-mix kernel. mix_kernels "
      "[--iterations=N] [--suite=all|kernelbot|cnn] [--tile=HxW] [--pairs=P]");
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const std::string suite = absl::GetFlag(FLAGS_suite);
  const Tile tile = absl::GetFlag(FLAGS_tile);
  const int pairs = absl::GetFlag(FLAGS_pairs).value_or(0);
  if (positional.size() > 1 || iterations < 1 ||
      (suite != "all" && suite != "kernelbot" && suite != "cnn") ||
      (absl::GetFlag(FLAGS_pairs).has_value() && pairs < 1)) {
    std::fprintf(stderr,
                 "usage: mix_kernels [--iterations=N] [--suite=all|kernelbot|cnn] [--tile=HxW] "
                 "[--pairs=P], N and P >= 1\n");
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
      o.tile_h = tile.h;
      o.tile_w = tile.w;
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
