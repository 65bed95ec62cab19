// Each input class has the property it is named for, and is reproducible from its seed.
#include "reference/input_classes.h"

#include <cmath>
#include <cstring>

#include "gtest/gtest.h"

namespace conv2d {
namespace {

const Shape kShape{2, 5, 7, 40, 36, 4, 3};

TEST(InputClasses, AreReproducibleAndFiniteButOne) {
  for (InputClass c : AllInputClasses()) {
    const Inputs a = MakeInputs(kShape, 7, c), b = MakeInputs(kShape, 7, c);
    ASSERT_EQ(a.x.size(), static_cast<size_t>(kShape.input_elements()));
    ASSERT_EQ(a.w.size(), static_cast<size_t>(kShape.filter_elements()));
    // Bitwise (NaN != NaN).
    EXPECT_EQ(std::memcmp(a.x.data(), b.x.data(), a.x.size() * 4), 0) << InputClassName(c);
    EXPECT_EQ(std::memcmp(a.w.data(), b.w.data(), a.w.size() * 4), 0) << InputClassName(c);
    if (c == InputClass::kNonFinite) continue;
    for (float v : a.x) ASSERT_TRUE(std::isfinite(v)) << InputClassName(c);
    for (float v : a.w) ASSERT_TRUE(std::isfinite(v)) << InputClassName(c);
  }
}

TEST(InputClasses, NonFiniteHasInfinitiesAndNaNs) {
  const Inputs a = MakeInputs(kShape, 7, InputClass::kNonFinite);
  int pos = 0, neg = 0, nan = 0;
  for (float v : a.x) {
    pos += v == INFINITY;
    neg += v == -INFINITY;
    nan += std::isnan(v);
  }
  EXPECT_EQ(pos, 1);
  EXPECT_EQ(neg, 1);
  EXPECT_EQ(nan, 1);
  int w_nan = 0;
  for (float v : a.w) w_nan += std::isnan(v);
  EXPECT_EQ(w_nan, 1);
}

TEST(InputClasses, HaveTheirProperty) {
  const Inputs ox = MakeInputs(kShape, 3, InputClass::kOutlierX);
  int outliers = 0;
  for (float v : ox.x) outliers += std::fabs(v) == 1e6f;
  EXPECT_EQ(outliers, 1);  // 20160 elements: one outlier
  const Inputs ow = MakeInputs(kShape, 3, InputClass::kOutlierW);
  int taps = 0;
  for (float v : ow.w) taps += std::fabs(v) == 1e4f;
  EXPECT_EQ(taps, kShape.out_channels);
  const Inputs lm = MakeInputs(kShape, 3, InputClass::kLargeMean);
  for (float v : lm.x) ASSERT_GE(v, 10.0f);
  const int64_t k = kShape.kernel_h * kShape.kernel_w;
  for (int64_t f = 0; f < kShape.out_channels * kShape.in_channels; ++f) {
    double sum = 0, abs = 0;
    for (int64_t t = 0; t < k; ++t) {
      sum += lm.w[f * k + t];
      abs += std::fabs(lm.w[f * k + t]);
    }
    EXPECT_LE(std::fabs(sum), 1e-6 * abs) << "filter " << f << " is not of zero sum";
  }
  const Inputs sp = MakeInputs(kShape, 3, InputClass::kSparse);
  int64_t zeros = 0;
  for (float v : sp.x) zeros += v == 0.0f;
  EXPECT_GT(zeros, kShape.input_elements() * 97 / 100);
  EXPECT_LT(zeros, kShape.input_elements());
  const Inputs randn = MakeInputs(kShape, 3, InputClass::kRandn);
  const Inputs huge = MakeInputs(kShape, 3, InputClass::kHuge);
  EXPECT_EQ(huge.x[17], randn.x[17] * 1e17f);
}

}  // namespace
}  // namespace conv2d
