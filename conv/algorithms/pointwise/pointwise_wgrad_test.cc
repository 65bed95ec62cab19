// pointwise_wgrad on the GPU against the fp64 reference at every element (seeded inputs,
// NaN-poisoned outputs and workspace): the networks' 1x1 layers scaled down, odd channel
// counts, batch 1, H != W, planes that are not a multiple of the chunk (chunks across images),
// several tiles on either side, long reductions cut into slices, the bias (db by the plan);
// every input class; inputs read afresh on every call; what it refuses. Fails without a GPU.
#include <vector>

#include "conv/algorithms/pointwise/pointwise_wgrad.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "pointwise_wgrad";

Shape Pw(int64_t b, int64_t cin, int64_t cout, int64_t h, int64_t w, bool bias = false) {
  Shape s{b, cin, cout, h, w, 1, 1};
  s.op = Op::kWgrad;
  s.has_bias = bias;
  return s;
}

std::vector<Shape> Shapes() {
  return {
      Pw(2, 16, 96, 28, 28),     // an expansion: one 96 x 16 tile
      Pw(2, 96, 24, 14, 14),     // a projection
      Pw(1, 3, 5, 7, 9),         // odd channels, batch 1, H != W, 63 terms: one partial chunk
      Pw(4, 144, 40, 28, 28),    // tiles on the longer side
      Pw(2, 200, 70, 9, 11),     // tiles on both sides, chunks across images
      Pw(3, 64, 64, 56, 56),     // ResNet's 64 -> 64: slices
      Pw(1, 8, 8, 100, 100),     // 32 k-groups of one thread each
      Pw(2, 130, 9, 5, 5, true), // db by the plan
      Pw(1, 1, 1, 1, 1),         // one term
      Pw(8, 24, 144, 56, 56),    // 25,088 terms: slices within the contract
  };
}

class PointwiseWgradTest : public ::testing::TestWithParam<Shape> {};

TEST_P(PointwiseWgradTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam(), kAlgorithm, int64_t{1} << 20);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PointwiseWgradTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return GtestName(info.param); });

// Every input class (outliers in x and in dy, a large mean, sparse, huge, tiny, non-finite) at
// every element, on a short and on a sliced reduction.
TEST(PointwiseWgradGpuTest, InputClasses) {
  for (const Shape& s : {Pw(2, 40, 24, 14, 14), Pw(4, 16, 24, 56, 56)}) {
    ExpectEveryClassWithinBar(s, kAlgorithm, 91);
  }
}

TEST(PointwiseWgradGpuTest, InputsChangeBetweenCalls) {
  absl::Status st = CheckInputsChangeBetweenCalls(kAlgorithm, Pw(2, 24, 40, 17, 13, true));
  EXPECT_TRUE(st.ok()) << st;
}

TEST(PointwiseWgradGpuTest, RefusesWhatItDoesNotCompute) {
  Shape k3 = Pw(1, 8, 8, 10, 10);
  k3.kernel_h = k3.kernel_w = 3;
  EXPECT_FALSE(Plan::Create(k3, kAlgorithm).ok());
  Shape fwd = Pw(1, 8, 8, 10, 10);
  fwd.op = Op::kFprop;
  EXPECT_FALSE(Plan::Create(fwd, kAlgorithm).ok());
}

}  // namespace
}  // namespace conv2d
