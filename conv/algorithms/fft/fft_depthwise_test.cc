// fft_depthwise on the GPU against the fp64 reference at every output (seeded uniform and normal
// inputs, NaN-poisoned output): RepLKNet's 31x31 and 13x13, odd sizes, batch 1 and odd batches
// (a pair whose second plane is empty), H != W, Kh != Kw, channel multipliers, asymmetric
// padding, no padding, padding past the kernel, the bias, 128-high tiles; inputs changed between
// calls (with a misaligned workspace); every input class (outliers, a large mean, sparse, huge,
// tiny, non-finite: the guard's direct fallback); the shapes it must refuse. Fails without a GPU.
#include <string>
#include <vector>

#include "conv/algorithms/fft/fft_depthwise.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "fft_depthwise";

std::vector<Shape> Shapes() {
  std::vector<Shape> v = {
      DepthwiseShape(4, 3, 1, 56, 56, 31, 31, 15, 1, 1, false),  // RepLKNet's 31x31: 2x2 tiles of 64
      DepthwiseShape(3, 5, 1, 7, 7, 13, 13, 6, 1, 1, true),      // 13x13 on 7x7, odd batch
      DepthwiseShape(1, 2, 1, 57, 61, 31, 31, 15, 1, 1, true),   // batch 1, odd sizes
      DepthwiseShape(2, 3, 2, 40, 23, 17, 9, 4, 1, 1, false),    // multiplier 2, Kh != Kw, H != W
      DepthwiseShape(5, 2, 1, 90, 100, 21, 21, 10, 1, 1, true),  // several tiles, odd batch
      DepthwiseShape(2, 2, 1, 33, 33, 33, 33, 0, 1, 1, false),   // K = H: one output
      DepthwiseShape(2, 2, 1, 140, 40, 27, 5, 2, 1, 1, true),    // tall: 128-high tiles
      DepthwiseShape(6, 2, 3, 20, 20, 1, 1, 0, 1, 1, true),      // K = 1 (the FFT still computes it)
      DepthwiseShape(2, 2, 1, 64, 64, 63, 63, 31, 1, 1, false),  // the largest kernel
  };
  Shape asym = DepthwiseShape(3, 4, 1, 37, 45, 15, 11, 0, 1, 1, true);
  asym.pad_top = 9, asym.pad_bottom = 2, asym.pad_left = 0, asym.pad_right = 10;
  v.push_back(asym);
  // Padding past the kernel: the lower tiles' input rows are all outside the image (no row to
  // transform; their outputs are the bias).
  Shape below = DepthwiseShape(2, 2, 1, 10, 12, 15, 15, 0, 1, 1, true);
  below.pad_bottom = 40, below.pad_left = below.pad_right = 7;
  v.push_back(below);
  return v;
}

class FftDepthwiseTest : public ::testing::TestWithParam<Shape> {};

TEST_P(FftDepthwiseTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam(), kAlgorithm, /*max_positions=*/1 << 20);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FftDepthwiseTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return GtestName(info.param); });

// A plan of 128-high tiles made before one of 32x32 tiles still runs: the later plan must not
// lower the filter kernel's shared-memory limit under the earlier one's 128 KB.
TEST(FftDepthwiseGpuTest, AnEarlierPlanStillRunsAfterOneOfSmallerTiles) {
  const absl::Status st = CheckEarlierPlanStillRuns(
      kAlgorithm, DepthwiseShape(2, 2, 1, 140, 40, 27, 5, 2, 1, 1, true),
      DepthwiseShape(3, 5, 1, 7, 7, 13, 13, 6, 1, 1, true));
  EXPECT_TRUE(st.ok()) << st;
}

// auto takes RepLKNet's 31x31 here: direct summation is 961 multiply-adds per output.
TEST(FftDepthwiseGpuTest, AutoTakesTheLargeKernel) {
  absl::StatusOr<std::string> pick = ChooseAlgorithm(DepthwiseShape(32, 128, 1, 56, 56, 31, 31, 15, 1, 1, false));
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(*pick, kAlgorithm);
}

TEST(FftDepthwiseGpuTest, InputsChangeBetweenCalls) {
  absl::Status st = CheckInputsChangeBetweenCalls(
      kAlgorithm, DepthwiseShape(3, 3, 2, 41, 37, 19, 17, 8, 1, 1, true));
  EXPECT_TRUE(st.ok()) << st;
}

// Every input class (outliers, a large mean, sparse, huge, tiny, non-finite) at every output:
// where the guard cannot trust the FFT it recomputes the output directly.
TEST(FftDepthwiseGpuTest, InputClasses) {
  for (const Shape& s : {DepthwiseShape(3, 4, 1, 56, 56, 31, 31, 15, 1, 1, false),
                         DepthwiseShape(2, 3, 1, 30, 33, 13, 13, 6, 1, 1, true)}) {
    ExpectEveryClassWithinBar(s, kAlgorithm, 79);
  }
}

TEST(FftDepthwisePlanTest, RefusesWhatItDoesNotCompute) {
  std::unique_ptr<Algorithm> a = MakeFftDepthwise();
  Shape strided = DepthwiseShape(1, 4, 1, 32, 32, 15, 15, 7, 1, 1, false);
  strided.stride_h = strided.stride_w = 2;
  EXPECT_EQ(a->CanImplement(strided).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(a->CanImplement(Shape{1, 8, 8, 40, 40, 15, 15}).code(),
            absl::StatusCode::kUnimplemented);  // not depthwise
  EXPECT_EQ(a->CanImplement(DepthwiseShape(1, 2, 1, 80, 80, 64, 64, 0, 1, 1, false)).code(),
            absl::StatusCode::kUnimplemented);  // past kMaxKernel
}

}  // namespace
}  // namespace conv2d
