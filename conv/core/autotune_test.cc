// "autotune" times the candidates on the GPU, keeps the fastest, caches it per problem, and the
// result meets the fp64 bar. Needs a GPU; fails without one.
#include <chrono>
#include <cstdio>

#include <cuda_runtime.h>

#include "conv/conv.h"
#include "conv/core/autotune.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

// The padded, biased shape has the first one's sizes: the cache tells them apart (a shared entry
// would hand it an algorithm timed on the other problem), and its candidates are timed with the
// bias as a plan runs them.
TEST(AutotuneTest, PicksACandidateCachesItAndIsCorrect) {
  Shape padded_bias{8, 16, 24, 40, 36, 3, 3};
  padded_bias.pad_top = padded_bias.pad_bottom = padded_bias.pad_left = padded_bias.pad_right = 1;
  padded_bias.has_bias = true;
  for (const Shape& s :
       {Shape{8, 16, 24, 40, 36, 3, 3}, padded_bias, Shape::KernelBot(64, 8, 32, 2)}) {
    int device = -1;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_FALSE(AutotuneCached(s, device)) << s.ToString();
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<Plan> first = Plan::Create(s, "autotune");
    const auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(first.ok()) << first.status();
    absl::StatusOr<Plan> again = Plan::Create(s, "autotune");
    const auto t2 = std::chrono::steady_clock::now();
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(AutotuneCached(s, device)) << s.ToString();
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

// A valid shape far beyond the device (8 TiB for x and y; direct_tiled would take it) is refused
// before autotune makes host copies of its inputs: a quick error, not a process killed for
// memory (round 80's first run of this test was).
TEST(AutotuneTest, RefusesAShapeTheDeviceCannotHoldBeforeAllocating) {
  const Shape huge{1, 1, 1, int64_t{1} << 20, int64_t{1} << 20, 1, 1};
  absl::StatusOr<Plan> plan = Plan::Create(huge, "autotune");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
  EXPECT_NE(plan.status().message().find("device memory"), absl::string_view::npos)
      << plan.status();
}

}  // namespace
}  // namespace conv2d
