// dot on the GPU against the fp64 reference at every output (seeded inputs, NaN-poisoned
// output): EfficientNet's squeeze-excite shapes, K = H with H != W, groups, term counts that are
// and are not multiples of 4 (16-byte and scalar loads), 4 to 32 lanes per output, batch 1, the
// bias, stride (moot), inputs changed between calls, data beyond randn; the weight gradient
// (dw and db) on the same shapes and on a batch past the direct-summation bound; and the shapes
// it must refuse. Fails without a GPU.
#include <string>
#include <vector>

#include "conv/algorithms/dot/dot.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "dot";

// A kernel the size of the image: one output pixel.
Shape Whole(int64_t b, int64_t cin, int64_t cout, int64_t h, int64_t w, int64_t groups,
            bool bias) {
  Shape s{b, cin, cout, h, w, h, w};
  s.groups = groups;
  s.has_bias = bias;
  return s;
}

std::vector<Shape> Shapes() {
  std::vector<Shape> v = {
      Whole(32, 48, 1152, 1, 1, 1, true),  // squeeze-excite expand: 48 terms, 16 lanes
      Whole(32, 1152, 48, 1, 1, 1, true),  // squeeze-excite reduce: 1152 terms, 32 lanes
      Whole(32, 4, 96, 1, 1, 1, true),     // 4 terms, 4 lanes
      Whole(5, 7, 3, 1, 1, 1, false),      // 7 terms: scalar loads
      Whole(1, 4, 4, 9, 9, 1, false),      // K = H = W, batch 1
      Whole(2, 5, 3, 12, 7, 1, true),      // Kh != Kw, H != W: 420 terms
      Whole(3, 6, 9, 5, 5, 3, true),       // groups 3: 50 terms per group
      Whole(2, 8, 8, 1, 1, 8, false),      // depthwise on 1x1: 1 term
      Whole(2, 30, 10, 3, 3, 2, true),     // groups 2, 135 terms
  };
  Shape strided = Whole(2, 16, 24, 6, 6, 1, true);
  strided.stride_h = strided.stride_w = 3;  // one output pixel all the same
  v.push_back(strided);
  // The weight gradient of each, and of a batch whose sum is longer than kMaxContractReduction.
  const size_t forward = v.size();
  for (size_t i = 0; i < forward; ++i) v.push_back(WithOp(v[i], Op::kWgrad));
  v.push_back(WithOp(Whole(5000, 6, 10, 1, 1, 1, true), Op::kWgrad));
  return v;
}

class DotTest : public ::testing::TestWithParam<Shape> {};

TEST_P(DotTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam(), kAlgorithm, /*max_positions=*/1 << 20);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DotTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return GtestName(info.param); });

// auto takes the squeeze-excite layers here, forward and weight gradient (depthwise on 1x1
// images goes to depthwise or dot: either is correct, so it is not asserted).
TEST(DotGpuTest, AutoTakesSqueezeExcite) {
  for (const Shape& s : {Whole(32, 48, 1152, 1, 1, 1, true), Whole(32, 20, 480, 1, 1, 1, true),
                         Whole(32, 1152, 48, 1, 1, 1, true)}) {
    for (Op op : {Op::kFprop, Op::kWgrad}) {
      absl::StatusOr<std::string> pick = ChooseAlgorithm(WithOp(s, op));
      ASSERT_TRUE(pick.ok()) << pick.status();
      EXPECT_EQ(*pick, kAlgorithm) << WithOp(s, op).ToString();
    }
  }
}

TEST(DotGpuTest, InputsChangeBetweenCalls) {
  for (Op op : {Op::kFprop, Op::kWgrad}) {
    absl::Status st =
        CheckInputsChangeBetweenCalls(kAlgorithm, WithOp(Whole(4, 24, 40, 3, 2, 2, true), op));
    EXPECT_TRUE(st.ok()) << st;
  }
}

// Every input class (outliers, a large mean, sparse, huge, tiny, non-finite) at every output.
TEST(DotGpuTest, InputClasses) {
  for (const Shape& s : {Whole(4, 96, 40, 1, 1, 1, false), Whole(2, 12, 10, 7, 7, 2, false),
                         WithOp(Whole(32, 48, 20, 1, 1, 1, true), Op::kWgrad),
                         WithOp(Whole(3, 12, 10, 7, 7, 2, false), Op::kWgrad)}) {
    ExpectEveryClassWithinBar(s, kAlgorithm, 78);
  }
}

TEST(DotPlanTest, RefusesWhatItDoesNotCompute) {
  std::unique_ptr<Algorithm> a = MakeDot();
  EXPECT_EQ(a->CanImplement(Shape{1, 8, 8, 10, 10, 3, 3}).code(),
            absl::StatusCode::kUnimplemented);  // more than one output pixel
  Shape padded = Whole(1, 8, 8, 3, 3, 1, false);
  padded.pad_top = padded.pad_bottom = padded.pad_left = padded.pad_right = 1;
  EXPECT_EQ(a->CanImplement(padded).code(), absl::StatusCode::kUnimplemented);
  // 5000 terms: beyond the direct-summation contract in fp32; the weight gradient sums in
  // double, and does not compute dgrad itself (the transposed forward does).
  EXPECT_EQ(a->WithinContract(Whole(1, 5000, 2, 1, 1, 1, false)).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(a->WithinContract(WithOp(Whole(5000, 2, 2, 1, 1, 1, false), Op::kWgrad)).ok());
  EXPECT_FALSE(a->Computes(Op::kDgrad));
}

}  // namespace
}  // namespace conv2d
