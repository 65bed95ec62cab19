// pointwise_wgrad on the GPU against the fp64 reference at every dw (and db) element, the output
// NaN-poisoned (testbed): EfficientNet's narrow 1x1 layers at small batches, each warp tile and
// orientation (PointwiseWgradPlanTest pins which shape takes which), channel counts off the
// tiles, odd planes (four-byte loads), batch 1, the bias, one slice and hundreds, the centred
// reduction (K past wgrad_split::kCenterK), inputs changed between calls, every input class;
// what it refuses. Bitwise repeats: determinism_test (its 1x1 shape). Fails without a GPU.
#include <string>
#include <vector>

#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "pointwise_wgrad";

Shape Wgrad(int64_t b, int64_t cin, int64_t cout, int64_t h, int64_t w, bool bias = false) {
  Shape s{b, cin, cout, h, w, 1, 1};
  s.has_bias = bias;
  return WithOp(s, Op::kWgrad);
}

std::vector<Shape> Shapes() {
  return {
      Wgrad(2, 32, 16, 112, 112),       // EfficientNet's first 1x1s, batch 2
      Wgrad(2, 16, 96, 112, 112, true),
      Wgrad(2, 24, 144, 56, 56),
      Wgrad(2, 144, 24, 56, 56),
      Wgrad(2, 96, 24, 56, 56),
      Wgrad(2, 64, 64, 56, 56),
      Wgrad(6, 40, 240, 28, 28),
      Wgrad(7, 16, 96, 112, 112),       // K = 87,808: x centred where its mean is large
      Wgrad(3, 20, 36, 7, 7, true),     // 49-pixel planes: four-byte loads, a chunk across images
      Wgrad(1, 5, 3, 5, 9),             // batch 1, 45 pixels, one slice: dw written directly
      Wgrad(2, 17, 33, 10, 10),         // channels off every tile
      Wgrad(4, 3, 8, 6, 6),
  };
}

TEST(PointwiseWgradGpuTest, MatchesFp64Reference) {
  for (const Shape& s : Shapes()) ExpectMatchesReference(s, kAlgorithm, /*max_positions=*/1 << 20);
}

TEST(PointwiseWgradGpuTest, InputsChangeBetweenCalls) {
  absl::Status st = CheckInputsChangeBetweenCalls(kAlgorithm, Wgrad(3, 24, 40, 12, 12, true));
  EXPECT_TRUE(st.ok()) << st;
}

// Every input class (outliers, a large mean, sparse, huge, tiny, non-finite) at every dw element,
// short and centred reductions, both orientations.
TEST(PointwiseWgradGpuTest, InputClasses) {
  for (const Shape& s : {Wgrad(2, 16, 96, 56, 56), Wgrad(2, 96, 24, 28, 28, true),
                         Wgrad(6, 32, 16, 112, 112), Wgrad(3, 20, 36, 7, 7)}) {
    ExpectEveryClassWithinBar(s, kAlgorithm, 91);
  }
}

}  // namespace
}  // namespace conv2d
