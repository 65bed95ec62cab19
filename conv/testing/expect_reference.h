// The GPU variant tests' accuracy check, as a gtest expectation: `algorithm` on `shape` against
// the fp64 reference for two seeded input sets (uniform, seed 11; normal, seed 12345), at up to
// `max_positions` output positions each (every element of smaller outputs), with one printed line
// per run for the logs.
#ifndef CONV2D_CONV_TESTING_EXPECT_REFERENCE_H_
#define CONV2D_CONV_TESTING_EXPECT_REFERENCE_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "conv/conv.h"
#include "conv/shape.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"

namespace conv2d {

inline void ExpectMatchesReference(const Shape& shape, const std::string& algorithm,
                                   int64_t max_positions) {
  struct Run {
    uint64_t seed;
    Distribution dist;
  };
  for (const Run& run : {Run{11, Distribution::kUniform}, Run{12345, Distribution::kNormal}}) {
    absl::StatusOr<Comparison> r =
        CheckAgainstReference(shape, algorithm, run.seed, max_positions, run.dist);
    ASSERT_TRUE(r.ok()) << shape.ToString() << ": " << r.status();
    std::printf("%-20s %-36s seed %-6llu %-7s %s\n", algorithm.c_str(), shape.ToString().c_str(),
                static_cast<unsigned long long>(run.seed),
                run.dist == Distribution::kNormal ? "normal" : "uniform", r->ToString().c_str());
    EXPECT_TRUE(r->ok()) << shape.ToString() << " seed " << run.seed << ": " << r->ToString()
                         << " first failure at " << r->first_failure;
  }
}

// `algorithm` on `shape` over every input class of reference/input_classes.h (outliers, a large
// mean, sparse, huge, tiny, non-finite; inputs seeded by `seed`), every output within the bar.
inline void ExpectEveryClassWithinBar(const Shape& shape, const std::string& algorithm,
                                      uint64_t seed) {
  for (InputClass c : AllInputClasses()) {
    absl::StatusOr<ClassProblem> p = MakeClassProblem(shape, seed, c);
    ASSERT_TRUE(p.ok()) << p.status();
    absl::StatusOr<Comparison> r = CheckClass(*p, algorithm);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->ok()) << shape.ToString() << " " << InputClassName(c) << ": "
                         << r->ToString();
  }
}

// auto's pick for `shape` is `algorithm`, or "dot" where the output is one pixel that sees the
// whole image (Kh = H, Kw = W, no padding): the families' tests that own a class of shapes.
inline void ExpectAutoTakes(const Shape& shape, const std::string& algorithm) {
  absl::StatusOr<std::string> pick = ChooseAlgorithm(shape);
  ASSERT_TRUE(pick.ok()) << pick.status();
  const bool whole =
      shape.kernel_h == shape.height && shape.kernel_w == shape.width && !shape.padded();
  if (whole && *pick == "dot") return;
  EXPECT_EQ(*pick, algorithm) << shape.ToString();
}

}  // namespace conv2d

#endif  // CONV2D_CONV_TESTING_EXPECT_REFERENCE_H_
