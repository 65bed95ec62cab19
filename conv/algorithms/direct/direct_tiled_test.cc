// "direct_tiled" against the fp64 reference.
//
// DirectTiledGpu.*: the kernel on the GPU. Without a GPU they fail (the testbed's first cudaMalloc,
// or Plan::Create's FailedPrecondition "no CUDA device"); they never skip.
// DirectTiledPlan.* and DirectTiledHostSim.*: the planner, and the kernel's own per-thread code
// run on the CPU with bounds checks and NaN-poisoned shared memory; no GPU needed:
//   bazel-bin/conv/direct_tiled_test --gtest_filter='DirectTiledPlan.*:DirectTiledHostSim.*'
#include "conv/algorithms/direct/direct_tiled.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "conv/shape.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace {

using direct_tiled_internal::NumConfigs;
using direct_tiled_internal::PlanTiling;
using direct_tiled_internal::SimulateOnHost;
using direct_tiled_internal::Tiling;

// Shape{batch, in_channels, out_channels, height, width, kernel_h, kernel_w}
std::vector<Shape> EdgeShapes() {
  return {
      Shape{2, 4, 6, 16, 16, 1, 1},        // K = 1
      Shape{2, 67, 33, 18, 21, 1, 1},      // K = 1, channels split into uneven stages
      Shape{1, 3, 5, 9, 9, 9, 9},          // K = H = W: one output pixel
      Shape{2, 3, 4, 17, 13, 17, 13},      // K = H, K = W, H != W
      Shape{2, 5, 7, 19, 23, 3, 3},        // odd H != W, channels 5 and 7
      Shape{1, 7, 13, 20, 31, 4, 6},       // Kh != Kw, channels 7 and 13
      Shape{1, 1, 1, 12, 10, 3, 2},        // one channel in and out
      Shape{3, 3, 8, 33, 17, 5, 1},        // three input channels, Kw = 1
      Shape{1, 1, 1, 1, 1, 1, 1},          // the smallest shape
      Shape{1, 13, 5, 40, 36, 32, 32},     // kernel 32 on a 40x36 image: kernel rows chunked
      Shape{4, 2, 130, 11, 9, 3, 3},       // > 128 output channels on a small image
      Shape{64, 5, 250, 10, 10, 3, 3},     // many small images, 250 channels: the 8x8x128 tiles
      Shape{1, 3, 9, 70, 66, 2, 3},        // 9 output channels
      Shape{2, 37, 64, 29, 35, 3, 3},      // 37 input channels: uneven stages
      Shape{1, 2, 3, 300, 310, 290, 300},  // kernel rows too long for one stage: columns chunked
      Shape::KernelBot(128, 8, 64, 1),
  };
}

// --- on the GPU -------------------------------------------------------------------------------

TEST(DirectTiledGpu, EdgeShapesMatchReference) {
  for (const Shape& shape : EdgeShapes()) {
    for (uint64_t seed : {1u, 2u}) {
      absl::StatusOr<Comparison> c = CheckAgainstReference(shape, "direct_tiled", seed, 1 << 16);
      ASSERT_TRUE(c.ok()) << shape.ToString() << " seed " << seed << ": " << c.status();
      std::printf("%-28s seed %d: %s\n", shape.ToString().c_str(), static_cast<int>(seed),
                  c->ToString().c_str());
      EXPECT_TRUE(c->ok()) << shape.ToString() << " seed " << seed << ": " << c->ToString()
                           << " first failure at " << c->first_failure;
    }
  }
}

TEST(DirectTiledGpu, LargestKernelBotCase) {
  const Shape shape = Shape::KernelBot(256, 32, 128, 1);
  absl::StatusOr<Comparison> c = CheckAgainstReference(shape, "direct_tiled", 1, 4096);
  ASSERT_TRUE(c.ok()) << shape.ToString() << ": " << c.status();
  std::printf("%-28s seed 1: %s\n", shape.ToString().c_str(), c->ToString().c_str());
  EXPECT_TRUE(c->ok()) << c->ToString() << " first failure at " << c->first_failure;
}

// --- the planner, no GPU ----------------------------------------------------------------------

TEST(DirectTiledPlan, StagesFitAndCoverTheReduction) {
  std::vector<Shape> shapes = EdgeShapes();
  for (const Shape& s :
       {Shape::KernelBot(128, 16, 64, 4), Shape::KernelBot(256, 16, 128, 2),
        Shape::KernelBot(256, 32, 128, 1), Shape{32, 512, 512, 9, 9, 3, 3},
        Shape{32, 256, 256, 56, 56, 1, 1}, Shape{8, 3, 64, 224, 224, 7, 7},
        Shape{1, 1, 1, 2000, 3000, 2000, 1500}, Shape{1, 1, 1, 8, 5000, 1, 4097}}) {
    shapes.push_back(s);
  }
  for (const Shape& s : shapes) {
    for (int config = -1; config < NumConfigs(); ++config) {
      absl::StatusOr<Tiling> t =
          PlanTiling(s, 132, direct_tiled_internal::kDefaultSmemBudgetBytes, config);
      ASSERT_TRUE(t.ok()) << s.ToString() << " config " << config << ": " << t.status();
      SCOPED_TRACE(s.ToString() + " config " + std::to_string(t->config));
      EXPECT_LE(t->stage_bytes, direct_tiled_internal::kDefaultSmemBudgetBytes);
      EXPECT_LE(t->smem_bytes, 227 * 1024);
      EXPECT_GE(t->chan_chunk, 1);
      EXPECT_GE(t->row_chunk, 1);
      EXPECT_GE(t->col_chunk, 1);
      EXPECT_LE(t->chan_chunk, s.in_channels);
      EXPECT_LE(t->row_chunk, s.kernel_h);
      EXPECT_LE(t->col_chunk, s.kernel_w);
      EXPECT_LE(int64_t{t->chan_chunk} * t->row_chunk * t->col_chunk, 1024);
      // The loader's contiguity assumption.
      const bool whole = t->row_chunk == s.kernel_h && t->col_chunk == s.kernel_w;
      const bool rows = t->chan_chunk == 1 && t->col_chunk == s.kernel_w;
      const bool cols = t->chan_chunk == 1 && t->row_chunk == 1;
      EXPECT_TRUE(whole || rows || cols);
      EXPECT_GE(t->in_stride, t->tile_w + t->col_chunk - 1);
      EXPECT_EQ(t->tiles_h * t->tile_h >= s.out_h(), true);
      EXPECT_EQ(t->tiles_w * t->tile_w >= s.out_w(), true);
      EXPECT_EQ(t->channel_blocks * t->block_channels >= s.out_channels, true);
      EXPECT_EQ(t->blocks, s.batch * t->tiles_h * t->tiles_w * t->channel_blocks);
    }
  }
}

TEST(DirectTiledPlan, EveryConfigurationAndStageKindIsExercisedByTheGpuShapes) {
  std::vector<bool> config_seen(NumConfigs(), false);
  bool chans = false, rows = false, cols = false;
  for (const Shape& s : EdgeShapes()) {
    absl::StatusOr<Tiling> t = PlanTiling(s, 132);
    ASSERT_TRUE(t.ok()) << t.status();
    config_seen[t->config] = true;
    if (t->chan_chunk > 1) chans = true;
    if (t->row_chunk < s.kernel_h && t->col_chunk == s.kernel_w) rows = true;
    if (t->col_chunk < s.kernel_w) cols = true;
  }
  for (int c = 0; c < NumConfigs(); ++c) EXPECT_TRUE(config_seen[c]) << "config " << c;
  EXPECT_TRUE(chans);
  EXPECT_TRUE(rows);
  EXPECT_TRUE(cols);
}

TEST(DirectTiledPlan, RejectsWhatItCannotIndex) {
  absl::StatusOr<Tiling> t = PlanTiling(Shape{1, 1, 1, 1, (int64_t{1} << 31) + 5, 1, 1}, 132);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kOutOfRange) << t.status();
}

// --- the kernel's code on the CPU -------------------------------------------------------------

// Simulates `s` with `config` under `budget_bytes`; returns the tiling used, or nothing when the
// budget is too small for that configuration.
std::optional<Tiling> ExpectSimulationMatches(const Shape& s, int config, int64_t budget_bytes) {
  absl::StatusOr<Tiling> t = PlanTiling(s, 132, budget_bytes, config);
  if (absl::IsInvalidArgument(t.status())) return std::nullopt;
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return std::nullopt;
  const auto x = RandomTensor(3, kInputTensor, s.input_elements());
  const auto w = RandomTensor(3, kFilterTensor, s.filter_elements());
  absl::StatusOr<std::vector<float>> y = SimulateOnHost(s, *t, x.data(), w.data());
  EXPECT_TRUE(y.ok()) << s.ToString() << " config " << t->config << ": " << y.status();
  if (!y.ok()) return *t;
  const std::vector<double> y64 = ReferenceConv(s, x.data(), w.data());
  const Comparison c = Compare(*y, y64, {}, kAbsTol, kRelTol);
  EXPECT_TRUE(c.ok()) << s.ToString() << " config " << t->config << " stages " << t->chan_chunk
                      << "x" << t->row_chunk << "x" << t->col_chunk << ": " << c.ToString()
                      << " first failure at " << c.first_failure;
  return *t;
}

std::vector<Shape> SimShapes() {
  return {
      Shape{2, 4, 6, 16, 16, 1, 1},  Shape{1, 3, 5, 9, 9, 9, 9},    Shape{2, 3, 4, 17, 13, 17, 13},
      Shape{2, 5, 7, 19, 23, 3, 3},  Shape{1, 7, 13, 20, 31, 4, 6}, Shape{1, 1, 1, 12, 10, 3, 2},
      Shape{3, 3, 8, 33, 17, 5, 1},  Shape{1, 1, 1, 1, 1, 1, 1},    Shape{1, 2, 3, 40, 36, 32, 32},
      Shape{1, 2, 130, 11, 9, 3, 3}, Shape{1, 3, 9, 40, 37, 2, 3},  Shape{1, 37, 10, 10, 11, 3, 3},
  };
}

TEST(DirectTiledHostSim, EveryConfigurationDefaultBudget) {
  for (const Shape& s : SimShapes()) {
    for (int config = 0; config < NumConfigs(); ++config) {
      EXPECT_TRUE(
          ExpectSimulationMatches(s, config, direct_tiled_internal::kDefaultSmemBudgetBytes))
          << s.ToString() << " config " << config;
    }
  }
}

// The KernelBot term count (128 channels x 32 x 32 = 131072 products per output) on an image just
// larger than the kernel: the blocked fp32/fp64 accumulation must stay well inside the bar.
TEST(DirectTiledHostSim, LongReductionAccuracy) {
  const Shape s{1, 128, 3, 33, 34, 32, 32};
  absl::StatusOr<Tiling> t = PlanTiling(s, 132);
  ASSERT_TRUE(t.ok()) << t.status();
  const auto x = RandomTensor(5, kInputTensor, s.input_elements());
  const auto w = RandomTensor(5, kFilterTensor, s.filter_elements());
  absl::StatusOr<std::vector<float>> y = SimulateOnHost(s, *t, x.data(), w.data());
  ASSERT_TRUE(y.ok()) << y.status();
  const Comparison c = Compare(*y, ReferenceConv(s, x.data(), w.data()), {}, kAbsTol, kRelTol);
  std::printf("%s config %d: %s\n", s.ToString().c_str(), t->config, c.ToString().c_str());
  EXPECT_TRUE(c.ok()) << c.ToString();
  EXPECT_LT(c.worst_ratio, 0.1) << c.ToString();
}

// Small budgets force the other two stage kinds (chunks of kernel rows, chunks of one row's
// columns) on shapes small enough to simulate; each configuration must see both.
TEST(DirectTiledHostSim, EveryConfigurationSmallBudgets) {
  for (int config = 0; config < NumConfigs(); ++config) {
    bool rows = false, cols = false;
    for (const Shape& s : SimShapes()) {
      for (int64_t budget : {3072, 4096, 6144, 8192, 12288, 16384}) {
        std::optional<Tiling> t = ExpectSimulationMatches(s, config, budget);
        if (!t.has_value()) continue;
        if (t->row_chunk < s.kernel_h && t->col_chunk == s.kernel_w) rows = true;
        if (t->col_chunk < s.kernel_w) cols = true;
      }
    }
    EXPECT_TRUE(rows) << "config " << config << " never chunked kernel rows";
    EXPECT_TRUE(cols) << "config " << config << " never chunked kernel columns";
  }
}

}  // namespace
}  // namespace conv2d
