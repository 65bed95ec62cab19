// winograd on the GPU against the fp64 reference (seeded inputs, NaN-poisoned output): 3x3
// shapes with partial tiles, odd sizes, batch 1, K = H, Cin != Cout, H != W, every element, uniform
// and normal inputs; the cnn suite's 3x3 shapes at 4096 sampled positions; inputs changed
// between calls; the refusal of other kernels through the public API. Needs a GPU: without one
// main() fails.
#include <ostream>
#include <vector>

#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "winograd";

struct Case {
  Shape shape;
  int64_t max_positions;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.shape.ToString() << " (" << c.max_positions << " positions)";
}

std::vector<Case> Cases() {
  constexpr int64_t kAll = 1 << 16;
  std::vector<Case> cases = {
      {Shape{1, 1, 1, 3, 3, 3, 3}, kAll},       // K = H = W: one output
      {Shape{3, 4, 2, 6, 6, 3, 3}, kAll},       // one whole tile per image
      {Shape{1, 3, 16, 33, 31, 3, 3}, kAll},    // RGB-like, odd sizes
      {Shape{2, 5, 7, 10, 13, 3, 3}, kAll},     // partial tiles in both dimensions
      {Shape{1, 2, 3, 7, 3, 3, 3}, kAll},       // W = K, H != W
      {Shape{2, 64, 9, 9, 9, 3, 3}, kAll},      // Cin != Cout, 7x7 outputs
      {Shape{4, 33, 65, 19, 40, 3, 3}, kAll},   // channel counts not multiples of 8
      {Shape{1, 300, 1, 6, 6, 3, 3}, kAll},     // Cout = 1, long reduction
  };
  for (const Shape& s : CnnShapes()) {
    if (s.kernel_h == 3) cases.push_back({s, 4096});
  }
  return cases;
}

class WinogradTest : public ::testing::TestWithParam<Case> {};

TEST_P(WinogradTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam().shape, kAlgorithm, GetParam().max_positions);
}

INSTANTIATE_TEST_SUITE_P(Shapes, WinogradTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.shape.ToString(); });

TEST(WinogradGpuTest, InputsChangeBetweenCalls) {
  absl::Status st = CheckInputsChangeBetweenCalls(kAlgorithm, Shape{2, 5, 7, 37, 29, 3, 3});
  EXPECT_TRUE(st.ok()) << st;
}

TEST(WinogradGpuTest, OtherKernelsAreRefused) {
  for (const Shape& s : {Shape{1, 4, 4, 9, 9, 5, 5}, Shape{1, 4, 4, 9, 9, 3, 2}}) {
    absl::StatusOr<Plan> plan = Plan::Create(s, kAlgorithm);
    ASSERT_FALSE(plan.ok()) << s.ToString();
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented) << plan.status();
  }
}

}  // namespace
}  // namespace conv2d
