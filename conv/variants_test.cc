// Every registered variant, on the standard shapes and the KernelBot test shapes it takes, two
// fresh seeds each, against the fp64 reference with a poisoned output. Needs a GPU; fails
// without one. Which variant may refuse which shape is itself checked (RefusalsAreDeclared).
#include <cstdio>

#include "conv/conv.h"
#include "conv/registry.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

struct Case {
  std::string algorithm;
  Shape shape;
};

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes = EdgeShapes();
  for (const Shape& s : KernelBotTestShapes()) shapes.push_back(s);
  return shapes;
}

bool Takes(const std::string& algorithm, const Shape& s) {
  return Registry::Global().Find(algorithm)->CanImplement(s).ok();
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const std::string& a : Algorithms()) {
    for (const Shape& s : Shapes()) {
      if (Takes(a, s)) cases.push_back({a, s});
    }
  }
  return cases;
}

// The only refusals among these shapes: winograd (F(4x4, 3x3)) of kernels other than 3x3, as
// Unimplemented. Every other variant takes every shape here.
TEST(Variants, RefusalsAreDeclared) {
  int refused = 0;
  for (const std::string& a : Algorithms()) {
    for (const Shape& s : Shapes()) {
      const absl::Status st = Registry::Global().Find(a)->CanImplement(s);
      if (st.ok()) continue;
      ++refused;
      const bool declared = a == "winograd" && !(s.kernel_h == 3 && s.kernel_w == 3) &&
                            st.code() == absl::StatusCode::kUnimplemented;
      EXPECT_TRUE(declared) << a << " refuses " << s.ToString() << ": " << st;
    }
  }
  std::printf("%d (variant, shape) pairs refused, all declared\n", refused);
}

class VariantsTest : public ::testing::TestWithParam<Case> {};

TEST_P(VariantsTest, MatchesFp64Reference) {
  const Case& c = GetParam();
  for (uint64_t seed : {uint64_t{11}, uint64_t{12345}}) {
    absl::StatusOr<Comparison> r = CheckAgainstReference(c.shape, c.algorithm, seed, 1 << 16);
    ASSERT_TRUE(r.ok()) << r.status();
    std::printf("%-14s %-34s seed %-6llu %s\n", c.algorithm.c_str(), c.shape.ToString().c_str(),
                static_cast<unsigned long long>(seed), r->ToString().c_str());
    EXPECT_TRUE(r->ok()) << r->ToString() << " first failure at " << r->first_failure;
  }
}

INSTANTIATE_TEST_SUITE_P(All, VariantsTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) {
                           return info.param.algorithm + "_" + info.param.shape.ToString();
                         });

}  // namespace
}  // namespace conv2d
