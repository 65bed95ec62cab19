// grouped_direct on the GPU against the fp64 reference at every output (up to 2^20 positions;
// seeded uniform and normal inputs, NaN-poisoned output): ResNeXt's groups of 8 and 4 channels
// at stride 1 and 2, two groups of odd width (3 in, 5 out), Cin != Cout both ways, batch 1,
// K = 1, 5x5 and 7x7 (both unrolled, one and two outputs a thread), the run-time loop (even,
// non-square and large kernels), stride larger than the kernel, dilation, asymmetric padding,
// H != W, 1x1 images, one-pixel outputs, the bias; auto takes every one of them; inputs changed
// between calls; every input class, the contract's longest sum (4608 terms) included; and the
// shapes it must refuse. Fails without a GPU.
#include <cstdint>
#include <string>
#include <vector>

#include "conv/algorithms/depthwise/depthwise.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "grouped_direct";

std::vector<Shape> Shapes() {
  std::vector<Shape> v = {
      // ResNeXt-50's 3x3 layers (32 groups of 8 channels at 256 wide), batch reduced:
      GroupedShape(2, 256, 256, 32, 28, 28, 3, 3, 1, 1, 1, false),  // stride 1, two outputs a thread
      GroupedShape(1, 256, 256, 32, 56, 56, 3, 3, 1, 2, 1, true),   // stride 2, one a thread
      GroupedShape(2, 256, 256, 32, 14, 14, 3, 3, 1, 1, 1, true),   // small planes
      GroupedShape(2, 128, 128, 32, 14, 14, 3, 3, 1, 1, 1, false),  // 4 channels per group
      GroupedShape(2, 6, 10, 2, 21, 18, 3, 3, 1, 1, 1, true),       // 3 in, 5 out per group
      GroupedShape(2, 6, 10, 2, 21, 18, 4, 3, 0, 1, 1, false),      // the golden geometry shape
      GroupedShape(3, 12, 8, 4, 17, 13, 3, 3, 1, 1, 1, true),       // Cin > Cout (3 in, 2 out)
      GroupedShape(1, 16, 24, 4, 9, 11, 1, 1, 0, 1, 1, true),       // K = 1, batch 1
      GroupedShape(1, 9, 6, 3, 20, 23, 5, 5, 2, 1, 1, false),       // 5x5, two outputs a thread
      GroupedShape(2, 8, 12, 2, 23, 19, 5, 5, 2, 2, 1, true),       // 5x5 stride 2
      GroupedShape(1, 10, 10, 5, 30, 33, 7, 7, 3, 1, 1, true),      // 7x7, two outputs a thread
      GroupedShape(2, 12, 6, 3, 23, 19, 7, 7, 3, 2, 1, false),      // 7x7 stride 2
      GroupedShape(2, 8, 8, 2, 33, 35, 6, 5, 2, 1, 1, true),        // run-time loop: 6x5
      GroupedShape(1, 6, 4, 2, 29, 27, 9, 9, 4, 1, 1, false),       // run-time loop: 9x9
      GroupedShape(1, 4, 6, 2, 25, 25, 2, 2, 0, 5, 1, true),        // stride larger than the kernel
      GroupedShape(2, 8, 8, 4, 19, 21, 3, 3, 2, 1, 2, false),       // dilation 2
      GroupedShape(2, 6, 6, 3, 1, 1, 3, 3, 1, 1, 1, true),          // 1x1 images: only the center
      GroupedShape(2, 8, 4, 2, 7, 7, 7, 7, 0, 1, 1, false),         // K = H: one output pixel
      GroupedShape(1, 128, 8, 2, 12, 12, 3, 3, 1, 1, 1, true),      // 64 channels per group
  };
  // Asymmetric padding, H != W, a column stride and a row dilation only, bias.
  Shape asym = GroupedShape(2, 9, 6, 3, 15, 16, 3, 4, 0, 1, 1, true);
  asym.pad_top = 2, asym.pad_bottom = 0, asym.pad_left = 1, asym.pad_right = 3;
  asym.stride_w = 2, asym.dilation_h = 2;
  v.push_back(asym);
  // The geometry list's "everything at once" (stride 2x3, dilation 2x1, 3 groups of 3 in, 2 out).
  v.push_back(WithGeometry({2, 9, 6, 33, 28, 5, 3}, 2, 1, 0, 3, 2, 3, 2, 1, 3, true));
  // Two outputs a thread under a row stride and dilation (the rows' step is not the columns').
  Shape rows = GroupedShape(2, 8, 16, 4, 21, 17, 3, 3, 1, 1, 1, true);
  rows.pad_top = 2, rows.pad_bottom = 1, rows.stride_h = 2, rows.dilation_h = 2;
  v.push_back(rows);
  return v;
}

class GroupedDirectTest : public ::testing::TestWithParam<Shape> {};

TEST_P(GroupedDirectTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam(), kAlgorithm, /*max_positions=*/1 << 20);
}

// Nothing else fast takes a grouped shape with several channels per group, so auto must pick
// grouped_direct (or dot, where the output is one pixel that sees the whole image).
TEST_P(GroupedDirectTest, AutoTakesIt) { ExpectAutoTakes(GetParam(), kAlgorithm); }

INSTANTIATE_TEST_SUITE_P(Shapes, GroupedDirectTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return GtestName(info.param); });

TEST(GroupedDirectGpuTest, InputsChangeBetweenCalls) {
  const absl::Status st = CheckInputsChangeBetweenCalls(
      kAlgorithm, GroupedShape(2, 6, 10, 2, 37, 29, 6, 5, 2, 1, 1, true));
  EXPECT_TRUE(st.ok()) << st;
}

// Every input class (outliers, a large mean, sparse, huge, tiny, non-finite) at every output: a
// ResNeXt-like 3x3 (8 channels per group, two outputs a thread), a padded 5x5 stride 2 with odd
// groups and a bias, the run-time loop, and the contract's longest sum: 512 channels per group at
// 3x3, 4608 terms. The non-finite class's NaN tap reaches the outputs where it falls in the
// padding too.
TEST(GroupedDirectGpuTest, InputClasses) {
  const std::vector<Shape> shapes = {GroupedShape(2, 32, 32, 4, 14, 15, 3, 3, 1, 1, 1, false),
                                     GroupedShape(2, 6, 10, 2, 29, 31, 5, 5, 2, 2, 1, true),
                                     GroupedShape(1, 8, 6, 2, 19, 17, 6, 5, 2, 1, 1, true),
                                     GroupedShape(1, 1024, 4, 2, 9, 9, 3, 3, 1, 1, 1, false)};
  for (const Shape& s : shapes) {
    ASSERT_TRUE(MakeGroupedDirect()->WithinContract(s).ok()) << s.ToString();
    ExpectEveryClassWithinBar(s, kAlgorithm, 77);
  }
}

TEST(GroupedDirectPlanTest, RefusesWhatItDoesNotCompute) {
  const std::unique_ptr<Algorithm> a = MakeGroupedDirect();
  // One group: the implicit GEMMs' and the others'.
  EXPECT_EQ(a->CanImplement(Shape{1, 8, 8, 10, 10, 3, 3}).code(),
            absl::StatusCode::kUnimplemented);
  // Depthwise, with and without a channel multiplier: depthwise's.
  EXPECT_EQ(a->CanImplement(GroupedShape(1, 8, 8, 8, 10, 10, 3, 3, 1, 1, 1, false)).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(a->CanImplement(GroupedShape(1, 4, 8, 4, 10, 10, 3, 3, 1, 1, 1, false)).code(),
            absl::StatusCode::kUnimplemented);
  // A kernel past 63 a side.
  EXPECT_EQ(a->CanImplement(GroupedShape(1, 4, 4, 2, 80, 80, 64, 64, 0, 1, 1, false)).code(),
            absl::StatusCode::kUnimplemented);
  // 5000 terms per output (200 channels per group at 5x5): taken, outside the contract.
  const Shape long_sum = GroupedShape(1, 400, 4, 2, 8, 8, 5, 5, 2, 1, 1, false);
  EXPECT_TRUE(a->CanImplement(long_sum).ok());
  EXPECT_EQ(a->WithinContract(long_sum).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace conv2d
