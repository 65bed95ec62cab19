// Every registered variant, on the standard shapes and the KernelBot test shapes, two fresh seeds
// each, against the fp64 reference with a poisoned output. Needs a GPU; fails without one.
#include <cstdio>

#include "conv/conv.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

struct Case {
  std::string algorithm;
  Shape shape;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  std::vector<Shape> shapes = EdgeShapes();
  for (const Shape& s : KernelBotTestShapes()) shapes.push_back(s);
  for (const std::string& a : Algorithms()) {
    for (const Shape& s : shapes) cases.push_back({a, s});
  }
  return cases;
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
