// pointwise_wgrad's choices on the CPU: which shapes it takes, the warp tile and orientation the
// model picks for EfficientNet's narrow layers (so that pointwise_wgrad_test's shapes run every
// kernel), and the split: within wgrad_split's limits, a function of the shape alone.
#include <set>
#include <utility>

#include "conv/algorithms/implicit_gemm/pointwise_wgrad.h"
#include "conv/conv.h"
#include "conv/core/device_info.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace pointwise_wgrad_internal {
namespace {

Shape Wgrad(int64_t b, int64_t cin, int64_t cout, int64_t h, int64_t w) {
  return WithOp(Shape{b, cin, cout, h, w, 1, 1}, Op::kWgrad);
}

TEST(PointwiseWgradPlanTest, RefusesWhatItDoesNotCompute) {
  std::unique_ptr<Algorithm> a = MakePointwiseWgrad();
  EXPECT_EQ(a->CanImplement(WithOp(Shape{2, 8, 8, 10, 10, 3, 3}, Op::kWgrad)).code(),
            absl::StatusCode::kUnimplemented);  // not 1x1
  EXPECT_EQ(a->CanImplement(WithGeometry(Wgrad(2, 8, 8, 10, 10), 0, 0, 0, 0, 2, 2)).code(),
            absl::StatusCode::kUnimplemented);  // strided
  EXPECT_EQ(a->CanImplement(WithGeometry(Wgrad(2, 8, 8, 10, 10), 1, 1, 1, 1, 1, 1)).code(),
            absl::StatusCode::kUnimplemented);  // padded
  EXPECT_EQ(a->CanImplement(Shape{2, 8, 8, 10, 10, 1, 1}).code(),
            absl::StatusCode::kUnimplemented);  // the forward
  EXPECT_EQ(a->CanImplement(WithOp(Shape{2, 8, 8, 10, 10, 1, 1}, Op::kDgrad)).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(a->CanImplement(Wgrad(32, 16, 96, 112, 112)).ok());
}

// The model's pick on the layers the kernel was written for, and on pointwise_wgrad_test's
// shapes: every warp tile and both orientations run on the GPU.
TEST(PointwiseWgradPlanTest, WarpTilesAndOrientation) {
  struct Case {
    Shape shape;
    int tile;
    bool x_rows;
  };
  const Case cases[] = {
      {Wgrad(32, 32, 16, 112, 112), 0, true},   // 32 x 16
      {Wgrad(32, 16, 96, 112, 112), 2, false},  // 96 x 16, dy's channels on the rows
      {Wgrad(32, 24, 144, 56, 56), 1, false},   // 3 tiles of 48 x 24
      {Wgrad(32, 144, 24, 56, 56), 1, true},
      {Wgrad(32, 64, 64, 56, 56), 3, false},
  };
  for (const Case& c : cases) {
    double seconds = 0;
    absl::StatusOr<Config> config = ChooseConfig(c.shape, &seconds);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->tile, c.tile) << c.shape.ToString();
    EXPECT_EQ(config->x_rows, c.x_rows) << c.shape.ToString();
    EXPECT_GT(seconds, 0);
  }
}

// auto's picks on the nets suite's 1x1 stride-1 wgrads as H100 call N measured them (PERF.md
// round 110, each forced): pointwise_wgrad where it was faster, implicit_gemm_wgmma elsewhere
// (but 240 -> 80 at 14x14, 0.020 ms against 0.028, which the bound leaves to the wgmma).
TEST(PointwiseWgradPlanTest, AutoTakesItWhereMeasuredFaster) {
  const Shape faster[] = {Wgrad(32, 32, 16, 112, 112), Wgrad(32, 16, 96, 112, 112),
                          Wgrad(32, 96, 24, 56, 56),   Wgrad(32, 24, 144, 56, 56),
                          Wgrad(32, 144, 24, 56, 56),  Wgrad(32, 144, 40, 28, 28),
                          Wgrad(32, 40, 240, 28, 28),  Wgrad(32, 240, 40, 28, 28)};
  for (const Shape& s : faster) EXPECT_EQ(ChooseAlgorithm(s).value_or("none"), "pointwise_wgrad");
  const Shape slower[] = {Wgrad(32, 64, 64, 56, 56),    Wgrad(32, 64, 256, 56, 56),
                          Wgrad(32, 256, 64, 56, 56),   Wgrad(32, 2048, 512, 7, 7),
                          Wgrad(32, 80, 480, 14, 14),   Wgrad(32, 480, 80, 14, 14),
                          Wgrad(32, 480, 112, 14, 14),  Wgrad(32, 112, 672, 14, 14),
                          Wgrad(32, 672, 192, 7, 7),    Wgrad(32, 192, 1152, 7, 7),
                          Wgrad(32, 1152, 192, 7, 7),   Wgrad(32, 1152, 320, 7, 7),
                          Wgrad(32, 320, 1280, 7, 7)};
  for (const Shape& s : slower) {
    EXPECT_EQ(ChooseAlgorithm(s).value_or("none"), "implicit_gemm_wgmma") << s.ToString();
    // Forced, it still runs there (the benchmark's measurements).
    EXPECT_TRUE(MakePointwiseWgrad()->CanImplement(s).ok()) << s.ToString();
  }
}

// K near 2^31 (every tensor still within int32): refused, not wrapped in the kernel's walk.
TEST(PointwiseWgradPlanTest, RefusesKPastItsWalk) {
  double seconds = 0;
  EXPECT_EQ(ChooseConfig(Wgrad(1, 1, 1, 16, 134217727), &seconds).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(MakePointwiseWgrad()->CanImplement(Wgrad(1, 1, 1, 16, 134217727)).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(PointwiseWgradPlanTest, SplitWithinLimits) {
  for (const Shape& s : {Wgrad(32, 16, 96, 112, 112), Wgrad(2, 17, 33, 10, 10),
                         Wgrad(1, 5, 3, 5, 9), Wgrad(32, 240, 40, 28, 28)}) {
    double seconds = 0;
    absl::StatusOr<Config> c = ChooseConfig(s, &seconds);
    ASSERT_TRUE(c.ok()) << c.status();
    const int64_t k = s.batch * s.height * s.width;
    const int64_t slice_terms = int64_t{c->split.slice_tiles} * kChunk;
    EXPECT_LE(slice_terms, kMaxContractReduction) << s.ToString();
    EXPECT_GE(slice_terms * c->split.slices, k) << s.ToString();
    EXPECT_LT(slice_terms * (c->split.slices - 1), k) << s.ToString();  // no empty slice
    double again = 0;
    absl::StatusOr<Config> d = ChooseConfig(s, &again);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->split.slices, c->split.slices);
    EXPECT_EQ(d->tile, c->tile);
  }
}

}  // namespace
}  // namespace pointwise_wgrad_internal
}  // namespace conv2d
