// depthwise on the GPU against the fp64 reference at every output (seeded uniform and normal
// inputs, NaN-poisoned output), through each of its kernels: "depthwise" (TilingFor's choice) and
// the lab's depthwise_staged and depthwise_streaming (the kernel forced), on every case: odd
// sizes, batch 1, K = 1, K = H, H != W, channel multipliers, stride (also larger than the kernel,
// and in one direction only), dilation, asymmetric padding, the bias, the networks' depthwise
// layers at reduced batch, the 31x31 large kernel; inputs changed between calls; data beyond randn
// (the input classes); the two kernels' outputs equal bit for bit; and shapes it must refuse.
// Fails without a GPU.
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "conv/algorithms/depthwise/depthwise.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"
#include "tools/lab/lab.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "depthwise";
// The shipped algorithm and its two kernels forced (registered by the lab, below).
const std::vector<std::string>& Variants() {
  static const auto* v =
      new std::vector<std::string>{kAlgorithm, "depthwise_staged", "depthwise_streaming"};
  return *v;
}

// The lab's algorithms are not the library's: registered here, before any test runs.
[[maybe_unused]] const bool kLabRegistered = RegisterLabAlgorithms().ok();

std::vector<Shape> Shapes() {
  std::vector<Shape> v = {
      DepthwiseShape(2, 5, 1, 13, 11, 3, 3, 1, 1, 1, false),    // odd sizes, pad 1
      DepthwiseShape(1, 3, 1, 9, 9, 1, 1, 0, 1, 1, true),       // K = 1, batch 1, bias
      DepthwiseShape(1, 4, 1, 7, 7, 7, 7, 0, 1, 1, false),      // K = H: one output
      DepthwiseShape(2, 6, 2, 17, 23, 5, 5, 2, 2, 1, true),     // multiplier 2, stride 2, H != W
      DepthwiseShape(1, 3, 3, 20, 20, 3, 3, 1, 1, 1, false),    // multiplier 3
      DepthwiseShape(2, 4, 1, 19, 21, 3, 3, 2, 1, 2, false),    // dilation 2
      DepthwiseShape(1, 2, 1, 25, 25, 2, 2, 0, 5, 1, true),     // stride larger than the kernel
      DepthwiseShape(1, 3, 1, 40, 70, 7, 7, 3, 1, 1, true),     // ConvNeXt's 7x7, several tiles
      DepthwiseShape(2, 8, 1, 28, 28, 5, 5, 2, 2, 1, false),    // EfficientNet's 5x5 stride 2
      DepthwiseShape(1, 4, 1, 56, 56, 31, 31, 15, 1, 1, false), // RepLKNet's 31x31
      DepthwiseShape(1, 4, 1, 7, 7, 13, 13, 6, 1, 1, true),     // 13x13 on 7x7: mostly padding
      // Several planes per CTA, the last CTA's group cut short (111 and 38 planes):
      DepthwiseShape(3, 37, 1, 7, 7, 5, 5, 2, 1, 1, true),      // EfficientNet's late 5x5
      DepthwiseShape(2, 19, 1, 14, 14, 5, 5, 2, 2, 1, false),   // 5x5 stride 2 onto 7x7
      DepthwiseShape(2, 7, 3, 9, 6, 3, 3, 1, 1, 1, true),       // multiplier 3: planes of one input
      DepthwiseShape(2, 11, 1, 1, 1, 3, 3, 1, 1, 1, true),      // 1x1 images
      DepthwiseShape(1, 5, 1, 50, 9, 7, 2, 3, 1, 1, false),     // kernel_w % 4 = 2, tall plane
      DepthwiseShape(1, 3, 1, 57, 61, 31, 31, 15, 1, 1, true),  // 31x31 on odd sizes: four tiles
      DepthwiseShape(2, 9, 1, 33, 35, 6, 5, 2, 1, 1, true),     // even kernel (6x5), pad 2
  };
  Shape asym = DepthwiseShape(2, 3, 1, 15, 16, 3, 4, 0, 1, 1, true);
  asym.pad_top = 2, asym.pad_bottom = 0, asym.pad_left = 1, asym.pad_right = 3;
  asym.stride_h = 1, asym.stride_w = 2, asym.dilation_h = 2, asym.dilation_w = 1;
  v.push_back(asym);
  // The streaming kernel's instantiations not reached above: 7x7 one output a thread (stride
  // 2), two a thread under a vertical stride and dilation (the rows' step is not the columns'),
  // and 5x5 with a column stride only.
  v.push_back(DepthwiseShape(2, 5, 1, 23, 19, 7, 7, 3, 2, 1, true));
  Shape rows = DepthwiseShape(2, 4, 2, 21, 17, 3, 3, 1, 1, 1, true);
  rows.pad_top = 2, rows.pad_bottom = 1, rows.stride_h = 2, rows.dilation_h = 2;
  v.push_back(rows);
  Shape cols = DepthwiseShape(1, 6, 1, 12, 27, 5, 5, 2, 1, 1, false);
  cols.stride_w = 2;
  v.push_back(cols);
  return v;
}

// Every shape through every variant.
class DepthwiseTest : public ::testing::TestWithParam<std::tuple<Shape, std::string>> {};

TEST_P(DepthwiseTest, MatchesFp64Reference) {
  ExpectMatchesReference(std::get<0>(GetParam()), std::get<1>(GetParam()),
                         /*max_positions=*/1 << 20);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DepthwiseTest, ::testing::Combine(::testing::ValuesIn(Shapes()),
                                              ::testing::ValuesIn(Variants())),
    [](const auto& info) {
      return GtestName(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
    });

class DepthwiseShapeTest : public ::testing::TestWithParam<Shape> {};

// auto takes it (never a forced variant), or "dot" where the output is one pixel that sees the
// whole image.
TEST_P(DepthwiseShapeTest, AutoTakesIt) { ExpectAutoTakes(GetParam(), kAlgorithm); }

// The kernels sum the same terms in the same order (row-major taps, fmaf from zero, then the
// bias), so what is measured of one is measured of the same result; NaN matches any NaN.
TEST_P(DepthwiseShapeTest, KernelsAgreeBitForBit) {
  const Shape& s = GetParam();
  absl::StatusOr<DeviceProblem> p = DeviceProblem::Create(s, 31, Distribution::kNormal);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::vector<float>> staged = RunOnce(*p, "depthwise_staged", {});
  ASSERT_TRUE(staged.ok()) << staged.status();
  absl::StatusOr<std::vector<float>> streaming = RunOnce(*p, "depthwise_streaming", {});
  ASSERT_TRUE(streaming.ok()) << streaming.status();
  ASSERT_EQ(staged->size(), streaming->size());
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < staged->size(); ++i) {
    const float a = (*staged)[i], b = (*streaming)[i];
    if (a != a && b != b) continue;
    if (std::memcmp(&a, &b, sizeof a) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++differ;
    }
  }
  EXPECT_EQ(differ, 0) << s.ToString() << ": first at " << first;
}

INSTANTIATE_TEST_SUITE_P(Shapes, DepthwiseShapeTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return GtestName(info.param); });

TEST(DepthwiseGpuTest, InputsChangeBetweenCalls) {
  for (const std::string& v : Variants()) {
    absl::Status st =
        CheckInputsChangeBetweenCalls(v, DepthwiseShape(2, 5, 2, 37, 29, 6, 5, 2, 1, 1, true));
    EXPECT_TRUE(st.ok()) << v << ": " << st;
  }
}

// Every input class (outliers, a large mean, sparse, huge, tiny, non-finite) at every output,
// through every variant: a stride-1 7x7 (staged by the rule), a padded 5x5 stride 2 with a
// multiplier and a 3x3 on 7x7 planes (both streamed by it). The non-finite class's NaN tap reaches
// the outputs where it falls in the padding too.
// A staged plan of large planes made before one of small planes still runs: the later plan must
// not lower the staged kernel's shared-memory limit under the earlier one's.
TEST(DepthwiseGpuTest, AnEarlierPlanStillRunsAfterOneOfLessSharedMemory) {
  const absl::Status st = CheckEarlierPlanStillRuns(
      "depthwise_staged", DepthwiseShape(2, 8, 1, 112, 112, 13, 13, 6, 1, 1, false),
      DepthwiseShape(1, 1, 1, 5, 5, 3, 3, 0, 1, 1, false));  // one 5x5 plane: a few hundred bytes
  EXPECT_TRUE(st.ok()) << st;
}

TEST(DepthwiseGpuTest, InputClasses) {
  const std::vector<Shape> shapes = {DepthwiseShape(2, 6, 1, 30, 33, 7, 7, 3, 1, 1, false),
                                     DepthwiseShape(2, 6, 2, 29, 31, 5, 5, 2, 2, 1, true),
                                     DepthwiseShape(3, 8, 1, 7, 7, 3, 3, 1, 1, 1, true)};
  for (const Shape& s : shapes) {
    for (InputClass c : AllInputClasses()) {
      absl::StatusOr<ClassProblem> p = MakeClassProblem(s, 77, c);
      ASSERT_TRUE(p.ok()) << p.status();
      for (const std::string& v : Variants()) {
        absl::StatusOr<Comparison> r = CheckClass(*p, v);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_TRUE(r->ok()) << s.ToString() << " " << v << " " << InputClassName(c) << ": "
                             << r->ToString();
      }
    }
  }
}

TEST(DepthwisePlanTest, RefusesWhatItDoesNotCompute) {
  std::vector<std::unique_ptr<Algorithm>> all;
  all.push_back(MakeDepthwise());
  all.push_back(depthwise_internal::MakeDepthwiseForced(/*staged=*/true));
  all.push_back(depthwise_internal::MakeDepthwiseForced(/*staged=*/false));
  for (const auto& a : all) {
    SCOPED_TRACE(a->name());
    Shape grouped{1, 8, 8, 10, 10, 3, 3};
    grouped.groups = 4;  // two input channels per group
    EXPECT_EQ(a->CanImplement(grouped).code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(a->CanImplement(Shape{1, 8, 8, 10, 10, 3, 3}).code(),
              absl::StatusCode::kUnimplemented);
    Shape huge = DepthwiseShape(1, 2, 1, 80, 80, 64, 64, 0, 1, 1, false);
    EXPECT_EQ(a->CanImplement(huge).code(), absl::StatusCode::kUnimplemented);
  }
}

}  // namespace
}  // namespace conv2d
