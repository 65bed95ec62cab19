// gemm_1x1 on the GPU against the fp64 reference (seeded inputs, NaN-poisoned
// output): 1x1 shapes with odd sizes, batch 1, Cin != Cout, H != W, one
// channel; the longest reduction it accepts, with margin; a batch split over
// two cuBLAS calls; the cnn suite's 1x1 case at 4096 sampled positions; inputs
// changed between calls; refusals through the public API. Needs a GPU: without
// one main() fails.
#include "conv/gemm_1x1.h"

#include <ostream>
#include <vector>

#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "gemm_1x1";
using gemm_1x1_internal::kMaxReduction;

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
      {Shape{1, 1, 1, 1, 1, 1, 1}, kAll},      // one multiply
      {Shape{2, 3, 8, 17, 17, 1, 1}, kAll},    // the edge shapes' K = 1 case
      {Shape{1, 13, 5, 21, 64, 1, 1}, kAll},   // H != W, Cin != Cout, odd channels
      {Shape{3, 1, 7, 9, 11, 1, 1}, kAll},     // one input channel
      {Shape{70000, 2, 3, 2, 3, 1, 1}, 4096},  // more images than one cuBLAS call takes
  };
  for (const Shape& s : CnnShapes()) {
    if (s.kernel_h == 1) cases.push_back({s, 4096});
  }
  return cases;
}

class Gemm1x1Test : public ::testing::TestWithParam<Case> {};

TEST_P(Gemm1x1Test, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam().shape, kAlgorithm, GetParam().max_positions);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Gemm1x1Test, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.shape.ToString(); });

// The accuracy argument's edge: the longest reduction accepted, normal inputs
// as KernelBot draws them, every element, with the benchmark's margin (worst
// ratio to the tolerance <= 0.6).
TEST(Gemm1x1GpuTest, LongestReductionKeepsMargin) {
  const Shape s{2, kMaxReduction, 24, 16, 16, 1, 1};
  for (uint64_t seed : {uint64_t{1}, uint64_t{2}, uint64_t{3}}) {
    absl::StatusOr<Comparison> r =
        CheckAgainstReference(s, kAlgorithm, seed, 1 << 16, Distribution::kNormal);
    ASSERT_TRUE(r.ok()) << r.status();
    std::printf("%s seed %llu: %s\n", s.ToString().c_str(), static_cast<unsigned long long>(seed),
                r->ToString().c_str());
    EXPECT_TRUE(r->ok()) << r->ToString();
    EXPECT_LE(r->worst_ratio, 0.6) << r->ToString();
  }
}

TEST(Gemm1x1GpuTest, InputsChangeBetweenCalls) {
  absl::Status st = CheckInputsChangeBetweenCalls(kAlgorithm, Shape{2, 5, 7, 37, 29, 1, 1});
  EXPECT_TRUE(st.ok()) << st;
}

TEST(Gemm1x1GpuTest, OtherShapesAreRefused) {
  for (const Shape& s : {Shape{1, 4, 4, 9, 9, 3, 3}, Shape{1, 4, 4, 9, 9, 1, 2},
                         Shape{1, kMaxReduction + 1, 4, 9, 9, 1, 1}}) {
    absl::StatusOr<Plan> plan = Plan::Create(s, kAlgorithm);
    ASSERT_FALSE(plan.ok()) << s.ToString();
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented) << plan.status();
  }
}

}  // namespace
}  // namespace conv2d
