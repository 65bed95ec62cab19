// The geometry beyond the basic form on the GPU: ~200 seeded random shapes (batch 1-3, channels
// 1-24 with groups dividing them, depthwise included, H/W 1-40, K 1-7, padding 0-3 per side,
// stride 1-3, dilation 1-3 per axis, a bias or not; draws ValidateShape refuses are skipped) and
// fixed edge cases (output 1x1, stride > kernel, padding on one side only, Cin != Cout with
// groups, padding wider than the kernel), each through "auto" and through every registered
// algorithm whose Propose takes it, the output poisoned first (the testbed's RunOnce), against the
// CPU fp64 reference at every element. Prints each failing shape with the algorithm and the
// first failing output. Needs a GPU: fails before running anything without one.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv/conv.h"
#include "conv/core/registry.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace {

// Reproducible everywhere (std's distributions are not): SplitMix64 over a counter.
class Draws {
 public:
  explicit Draws(uint64_t seed) : seed_(seed) {}
  int64_t Uniform(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(SplitMix64(seed_ * 0x9E3779B97F4A7C15ull + n_++) %
                                     static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t seed_, n_ = 0;
};

// Each part of the geometry is drawn on half the time (groups: a quarter depthwise, a quarter 2-6
// groups), so that the draws hold basic shapes and shapes with one part or a few, for algorithms
// that compute some parts and not others, as well as everything at once.
Shape Draw(Draws& d) {
  Shape s;
  s.batch = d.Uniform(1, 3);
  switch (d.Uniform(0, 3)) {
    case 0:  // depthwise, with a channel multiplier
      s.in_channels = d.Uniform(1, 24);
      s.groups = s.in_channels;
      s.out_channels = s.in_channels * d.Uniform(1, 24 / s.in_channels);
      break;
    case 1:  // 2-6 groups, any channels per group
      s.groups = d.Uniform(2, 6);
      s.in_channels = s.groups * d.Uniform(1, 24 / s.groups);
      s.out_channels = s.groups * d.Uniform(1, 24 / s.groups);
      break;
    default:  // one group
      s.in_channels = d.Uniform(1, 24);
      s.out_channels = d.Uniform(1, 24);
  }
  s.height = d.Uniform(1, 40);
  s.width = d.Uniform(1, 40);
  s.kernel_h = d.Uniform(1, 7);
  s.kernel_w = d.Uniform(1, 7);
  if (d.Uniform(0, 1)) {
    s.pad_top = d.Uniform(0, 3);
    s.pad_bottom = d.Uniform(0, 3);
    s.pad_left = d.Uniform(0, 3);
    s.pad_right = d.Uniform(0, 3);
  }
  if (d.Uniform(0, 1)) {
    s.stride_h = d.Uniform(1, 3);
    s.stride_w = d.Uniform(1, 3);
  }
  if (d.Uniform(0, 1)) {
    s.dilation_h = d.Uniform(1, 3);
    s.dilation_w = d.Uniform(1, 3);
  }
  s.has_bias = d.Uniform(0, 1) == 1;
  return s;
}

struct Tally {
  int ran = 0, refused = 0, failed = 0;
};

struct Summary {
  std::map<std::string, Tally> by_algorithm;
  int shapes = 0, failures = 0, auto_refused = 0;
  void Print() const {
    std::printf("%d shapes, %d failures; auto refused %d (no algorithm that auto may pick takes "
                "them)\n",
                shapes, failures, auto_refused);
    for (const auto& [name, t] : by_algorithm) {
      std::printf("  %-24s ran %4d  refused %4d  failed %4d\n", name.c_str(), t.ran, t.refused,
                  t.failed);
    }
  }
};

std::string Where(const Shape& s, int64_t flat) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  const int64_t j = flat % ow, i = flat / ow % oh, o = flat / (ow * oh) % s.out_channels,
                b = flat / (ow * oh * s.out_channels);
  return absl::StrCat("y[", b, ", ", o, ", ", i, ", ", j, "] (flat ", flat, ")");
}

// Runs `shape` (inputs from `seed`) through auto and every algorithm that takes it; records into
// `summary` and prints each failure.
void Judge(const Shape& shape, uint64_t seed, Summary* summary) {
  ++summary->shapes;
  absl::StatusOr<DeviceProblem> problem = DeviceProblem::Create(shape, seed);
  ASSERT_TRUE(problem.ok()) << shape.ToString() << ": " << problem.status();
  const Expected expected = ReferenceFor(*problem, INT64_MAX, seed);  // every element
  ASSERT_TRUE(expected.positions.empty());
  // Whether auto must take it: some algorithm it may pick (a finite estimate) proposes.
  bool auto_should_take = false;
  std::vector<std::string> names = {"auto"};
  for (const std::string& name : Algorithms()) {
    names.push_back(name);
    const Algorithm* a = Registry::Global().Find(name);
    if (a->CanImplement(shape).ok() && std::isfinite(a->EstimateSeconds(shape))) {
      auto_should_take = true;
    }
  }
  auto fail = [&](const std::string& name, const std::string& why) {
    ++summary->failures;
    ++summary->by_algorithm[name].failed;
    std::printf("FAIL %-24s %-56s seed %" PRIu64 ": %s\n", name.c_str(), shape.ToString().c_str(),
                seed, why.c_str());
    ADD_FAILURE() << name << " on " << shape.ToString() << " (seed " << seed << "): " << why;
  };
  for (const std::string& name : names) {
    Tally& t = summary->by_algorithm[name];
    if (name != "auto") {
      const absl::Status takes = Registry::Global().Find(name)->CanImplement(shape);
      if (!takes.ok()) {
        ++t.refused;
        // A refusal is "not this shape", never an error of the call.
        if (takes.code() != absl::StatusCode::kUnimplemented &&
            takes.code() != absl::StatusCode::kOutOfRange &&
            takes.code() != absl::StatusCode::kResourceExhausted) {
          fail(name, absl::StrCat("refuses with an unexpected code: ", takes.ToString()));
        }
        continue;
      }
    }
    absl::StatusOr<std::vector<float>> y = RunOnce(*problem, name, {});
    if (!y.ok()) {
      if (name == "auto" && !auto_should_take &&
          y.status().code() == absl::StatusCode::kUnimplemented) {
        ++t.refused;
        ++summary->auto_refused;
        continue;
      }
      if (y.status().code() == absl::StatusCode::kFailedPrecondition) {
        ++t.refused;  // this GPU cannot run it (e.g. sm_90 only)
        std::printf("SKIP %-24s %-56s (%s)\n", name.c_str(), shape.ToString().c_str(),
                    std::string(y.status().message()).c_str());
        continue;
      }
      fail(name, y.status().ToString());
      continue;
    }
    if (name == "auto" && !auto_should_take) {
      fail(name, "auto took a shape no algorithm it may pick proposes for");
    }
    ++t.ran;
    const Comparison c = Compare(*y, expected.y64, {}, kAbsTol, kRelTol);
    if (!c.ok()) {
      const int64_t k = c.first_failure;
      fail(name, absl::StrCat(c.ToString(), "; first at ", Where(shape, k), ": got ",
                              k >= 0 ? (*y)[k] : 0.0f, ", want ", k >= 0 ? expected.y64[k] : 0.0));
    }
  }
}

TEST(Geometry, FixedEdgeCases) {
  auto g = [](Shape s, int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t sh, int64_t sw,
              int64_t dh, int64_t dw, int64_t groups, bool bias) {
    return WithGeometry(s, pt, pb, pl, pr, sh, sw, dh, dw, groups, bias);
  };
  struct Case {
    const char* what;
    Shape shape;
  };
  const Case cases[] = {
      // Output 1x1: the dilated kernel is the image; a stride past the only window; a 1x1 image
      // padded to the kernel (only the centre tap sees it).
      {"1x1 out: span = image", g({2, 3, 5, 5, 5, 3, 3}, 0, 0, 0, 0, 1, 1, 2, 2, 1, true)},
      {"1x1 out: stride past", g({1, 4, 4, 7, 6, 3, 3}, 0, 0, 0, 0, 5, 4, 1, 1, 1, false)},
      {"1x1 out: 1x1 image padded", g({2, 5, 3, 1, 1, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1, 1, true)},
      // Stride larger than the kernel: rows and columns never read; the 1x1 stride-2 shortcut.
      {"stride > kernel", g({2, 5, 3, 20, 17, 2, 1}, 0, 0, 0, 0, 3, 3, 1, 1, 1, false)},
      {"1x1 stride 2 shortcut", g({2, 8, 16, 14, 14, 1, 1}, 0, 0, 0, 0, 2, 2, 1, 1, 1, true)},
      // Padding on one side only, each side.
      {"pad top only", g({1, 3, 4, 13, 11, 3, 3}, 2, 0, 0, 0, 1, 1, 1, 1, 1, false)},
      {"pad bottom only", g({1, 3, 4, 13, 11, 3, 3}, 0, 3, 0, 0, 1, 1, 1, 1, 1, false)},
      {"pad left only", g({1, 3, 4, 13, 11, 3, 3}, 0, 0, 1, 0, 1, 1, 1, 1, 1, false)},
      {"pad right only", g({1, 3, 4, 13, 11, 3, 3}, 0, 0, 0, 2, 1, 1, 1, 1, 1, true)},
      // F.conv2d's padding="same" for an even kernel: the extra row/column at the bottom/right.
      {"same, even kernel", g({2, 4, 4, 12, 12, 4, 4}, 1, 2, 1, 2, 1, 1, 1, 1, 1, true)},
      // Padding wider than the kernel: border outputs see only zeros (= the bias).
      {"pad > kernel", g({1, 2, 3, 4, 4, 2, 2}, 3, 3, 3, 3, 1, 1, 1, 1, 1, true)},
      // Cin != Cout with groups: more outputs per group, fewer, and depthwise x3.
      {"groups 3, Cout > Cin", g({2, 6, 9, 11, 10, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1, 3, false)},
      {"groups 2, Cout < Cin", g({2, 10, 4, 8, 8, 2, 2}, 0, 0, 0, 0, 1, 1, 1, 1, 2, true)},
      {"depthwise x3", g({1, 4, 12, 9, 9, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1, 4, true)},
      {"depthwise 1 channel", g({3, 1, 1, 17, 19, 5, 5}, 2, 2, 2, 2, 1, 1, 1, 1, 1, false)},
      // Everything at once, per-axis differences everywhere.
      {"all", g({3, 12, 8, 31, 26, 4, 3}, 3, 0, 1, 2, 2, 3, 2, 3, 4, true)},
  };
  Summary summary;
  uint64_t seed = 700;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_TRUE(ValidateShape(c.shape).ok()) << c.what << ": " << ValidateShape(c.shape);
    Judge(c.shape, ++seed, &summary);
  }
  // The golden files' geometry set too (regress judges them from the files).
  for (const Shape& s : GeometryShapes()) Judge(s, ++seed, &summary);
  summary.Print();
  EXPECT_EQ(summary.failures, 0);
}

TEST(Geometry, RandomDraws) {
  constexpr int kShapes = 200;
  constexpr uint64_t kSeed = 2026;
  Draws draws(kSeed);
  Summary summary;
  int rejected = 0, attempts = 0;
  int padded = 0, strided = 0, dilated = 0, grouped = 0, depthwise = 0, biased = 0, basic = 0;
  while (summary.shapes < kShapes && attempts < 100 * kShapes) {
    ++attempts;
    const Shape s = Draw(draws);
    if (!ValidateShape(s).ok()) {
      ++rejected;
      continue;
    }
    padded += s.padded();
    strided += s.strided();
    dilated += s.dilated();
    grouped += s.grouped();
    depthwise += s.grouped() && s.groups == s.in_channels;
    biased += s.has_bias;
    basic += s.basic();
    Judge(s, kSeed * 1000 + summary.shapes, &summary);
  }
  std::printf("draws (seed %" PRIu64 "): %d tried, %d refused by ValidateShape; of the %d run: "
              "%d padded, %d strided, %d dilated, %d grouped (%d depthwise), %d with a bias, "
              "%d basic\n",
              kSeed, attempts, rejected, summary.shapes, padded, strided, dilated, grouped,
              depthwise, biased, basic);
  summary.Print();
  EXPECT_EQ(summary.shapes, kShapes) << "too few valid draws";
  EXPECT_EQ(summary.failures, 0);
  // Every drawn shape is taken by some algorithm: the oracle takes every geometry.
  EXPECT_EQ(summary.by_algorithm["direct"].ran, summary.shapes);
}

}  // namespace
}  // namespace conv2d
