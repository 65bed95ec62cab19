// fft_tiled on the GPU against the fp64 reference: edge shapes, the KernelBot test shapes, forced
// tile sizes, the precision options (fp64 filter transform; 3m or 3xTF32 channel mix), inputs and
// filters changed between calls on one plan, and the worst error ratio on the benchmark shapes.
// Fails (never skips) when no GPU is present.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "conv/conv.h"
#include "conv/core/cuda_status.h"
#include "conv/algorithms/fft/fft_tiled_internal.h"
#include "tools/lab/fft_tiled.h"
#include "tools/lab/lab.h"
#include "conv/core/status_macros.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/reference.h"

namespace conv2d {
namespace fft_tiled {
namespace {

// The lab's algorithms are not the library's: registered here, before any test runs.
[[maybe_unused]] const bool kLabRegistered = RegisterLabAlgorithms().ok();


constexpr int64_t kPositions = 1 << 16;
// What the benchmark shapes must keep: the prototype measured 0.51-0.56 on the K=32 case.
constexpr double kBenchmarkRatioLimit = 0.6;

void Print(const std::string& what, const Shape& s, uint64_t seed, const Comparison& c) {
  std::printf("fft_tiled %-22s %-34s seed %-4llu %s\n", what.c_str(), s.ToString().c_str(),
              static_cast<unsigned long long>(seed), c.ToString().c_str());
}

std::string TileName(const Shape& s, const Options& o) {
  absl::StatusOr<Config> c = ChooseConfig(s, o);
  if (!c.ok()) return "?";
  std::string name = std::to_string(c->geometry.tile_h) + "x" + std::to_string(c->geometry.tile_w);
  if (o.filter_fp64) name += " fp64w";
  if (o.gemm_3m) name += " 3m";
  if (o.gemm_3xtf32) name += " 3xtf32";
  return name;
}

// A runner with explicit options, on seeded inputs, against the reference.
absl::StatusOr<Comparison> CheckWithOptions(const Shape& s, const Options& o, uint64_t seed,
                                            int64_t max_positions) {
  ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner, CreateRunner(s, o));
  ASSIGN_OR_RETURN(DeviceProblem p, DeviceProblem::Create(s, seed));
  const Expected e = ReferenceFor(p, max_positions, seed);
  DeviceBuffer ws;
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&ws.p, runner->workspace_bytes()), "cudaMalloc ws"));
  return RunAndCompare(*runner, p, e, ws.p, runner->workspace_bytes(), nullptr);
}

TEST(FftTiledTest, IsRegistered) {
  const std::vector<std::string> names = Algorithms();
  EXPECT_NE(std::find(names.begin(), names.end(), "fft_tiled"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "fft_tiled_3xtf32"), names.end());
  for (const Shape& s : KernelBotBenchmarkShapes()) {
    absl::StatusOr<std::string> chosen = ChooseAlgorithm(s);
    std::printf("auto picks %s for %s\n", chosen.ok() ? chosen->c_str() : "nothing",
                s.ToString().c_str());
  }
}

class FftTiledShapeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(FftTiledShapeTest, MatchesFp64Reference) {
  const Shape s = GetParam();
  for (uint64_t seed : {uint64_t{1}, uint64_t{2}}) {
    absl::StatusOr<Comparison> c = CheckAgainstReference(s, "fft_tiled", seed, kPositions);
    ASSERT_TRUE(c.ok()) << c.status();
    Print(TileName(s, Options{}), s, seed, *c);
    EXPECT_TRUE(c->ok()) << s.ToString() << " " << c->ToString() << " first failure at "
                         << c->first_failure;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FftTiledShapeTest, ::testing::ValuesIn(EdgeAndTestShapes()),
                         [](const auto& info) { return info.param.ToString(); });

TEST(FftTiledTest, ForcedTileSizes) {
  struct Case {
    Shape shape;
    int64_t tile_h, tile_w;
  };
  const std::vector<Case> cases = {
      {{2, 3, 2, 5, 7, 1, 1}, 2, 2},          // K = 1, the smallest tile
      {{2, 2, 3, 9, 7, 4, 3}, 4, 3},          // T = K: one output per tile, odd width
      {{2, 2, 3, 9, 7, 4, 3}, 6, 5},          // odd transform width
      {{1, 4, 6, 33, 31, 3, 3}, 48, 12},      // radix 3, larger than the image in one dimension
      {{1, 16, 24, 64, 48, 16, 8}, 16, 96},   // T = Kh, wide tile
      {{1, 6, 6, 40, 36, 32, 32}, 32, 32},    // T = K on a large kernel
      {{1, 6, 6, 40, 36, 32, 32}, 64, 64},    // one tile holds everything
      {Shape::KernelBot(64, 8, 32, 2), 16, 16},
      {Shape::KernelBot(64, 8, 32, 2), 24, 128},
  };
  for (const Case& c : cases) {
    Options o;
    o.tile_h = c.tile_h;
    o.tile_w = c.tile_w;
    absl::StatusOr<Comparison> r = CheckWithOptions(c.shape, o, 7, kPositions);
    ASSERT_TRUE(r.ok()) << c.shape.ToString() << ": " << r.status();
    Print(TileName(c.shape, o), c.shape, 7, *r);
    EXPECT_TRUE(r->ok()) << c.shape.ToString() << " tile " << c.tile_h << "x" << c.tile_w << " "
                         << r->ToString() << " first failure at " << r->first_failure;
  }
}

TEST(FftTiledTest, PrecisionOptions) {
  for (const Shape& s : {Shape{3, 7, 13, 19, 23, 5, 4}, Shape::KernelBot(256, 32, 128, 1)}) {
    for (int variant = 0; variant < 5; ++variant) {
      Options o;
      o.filter_fp64 = variant == 1 || variant == 4;
      o.gemm_3m = variant == 2;
      o.gemm_3xtf32 = variant == 3 || variant == 4;
      absl::StatusOr<Comparison> r = CheckWithOptions(s, o, 3, 4096);
      ASSERT_TRUE(r.ok()) << s.ToString() << ": " << r.status();
      Print(TileName(s, o), s, 3, *r);
      EXPECT_TRUE(r->ok()) << s.ToString() << " " << TileName(s, o) << " " << r->ToString();
    }
  }
}

// One plan, one workspace (at an unaligned address), a non-default stream: a second problem's
// filter and input must be used, not anything left from the first.
TEST(FftTiledTest, InputsChangeBetweenCalls) {
  absl::Status st = CheckInputsChangeBetweenCalls("fft_tiled");
  EXPECT_TRUE(st.ok()) << st;
}

TEST(FftTiledTest, BenchmarkShapesWorstRatio) {
  std::vector<Shape> shapes = KernelBotBenchmarkShapes();
  shapes.erase(shapes.begin() + 3);  // the fourth case repeats the third
  for (const Shape& s : shapes) {
    absl::StatusOr<Plan> plan = Plan::Create(s, "fft_tiled");
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::printf("fft_tiled %s tile %s workspace %.1f MiB\n", s.ToString().c_str(),
                TileName(s, Options{}).c_str(), plan->workspace_bytes() / 1048576.0);
    EXPECT_LE(plan->workspace_bytes(), kTargetWorkspaceBytes) << s.ToString();
    double worst = 0;
    for (uint64_t seed : {uint64_t{1}, uint64_t{2}, uint64_t{3}}) {
      absl::StatusOr<Comparison> c = CheckAgainstReference(s, "fft_tiled", seed, 4096);
      ASSERT_TRUE(c.ok()) << c.status();
      Print(TileName(s, Options{}), s, seed, *c);
      EXPECT_TRUE(c->ok()) << s.ToString() << " " << c->ToString();
      worst = std::max(worst, c->worst_ratio);
    }
    std::printf("fft_tiled %s worst_ratio %.4f over 3 seeds\n", s.ToString().c_str(), worst);
    EXPECT_LE(worst, kBenchmarkRatioLimit) << s.ToString();
  }
}

}  // namespace
}  // namespace fft_tiled
}  // namespace conv2d
