// "autotune" times the candidates on the GPU, keeps the fastest, caches it, and the result meets
// the fp64 bar. Needs a GPU; fails without one.
#include <chrono>
#include <cstdio>

#include "conv/conv.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

TEST(AutotuneTest, PicksACandidateCachesItAndIsCorrect) {
  for (const Shape& s : {Shape{8, 16, 24, 40, 36, 3, 3}, Shape::KernelBot(64, 8, 32, 2)}) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<Plan> first = Plan::Create(s, "autotune");
    const auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(first.ok()) << first.status();
    absl::StatusOr<Plan> again = Plan::Create(s, "autotune");
    const auto t2 = std::chrono::steady_clock::now();
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(first->algorithm(), again->algorithm());
    EXPECT_NE(first->algorithm(), "direct");  // the oracle is never a candidate
    std::printf("%s: autotune -> %s (first %.1f ms, cached %.3f ms)\n", s.ToString().c_str(),
                first->algorithm().c_str(),
                std::chrono::duration<double, std::milli>(t1 - t0).count(),
                std::chrono::duration<double, std::milli>(t2 - t1).count());
    absl::StatusOr<Comparison> c = CheckAgainstReference(s, "autotune", 77, 1 << 16);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->ok()) << c->ToString();
  }
}

// A valid shape that nothing would time (1 TiB of input, past every candidate's limits) is
// refused before autotune allocates anything for it: a quick error, not an out-of-memory crash.
TEST(AutotuneTest, RefusesAShapeNoCandidateTakesBeforeAllocating) {
  const Shape huge{1, 1, 1, int64_t{1} << 20, int64_t{1} << 20, 1, 1};
  absl::StatusOr<Plan> plan = Plan::Create(huge, "autotune");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented) << plan.status();
}

}  // namespace
}  // namespace conv2d
