// implicit_gemm_wgmma's weight gradient on the GPU against the fp64 reference (NaN-poisoned dw):
// the CPU replay's shapes (groups, depthwise, strides, padding, dilation, odd sizes, several M and
// N tiles; every element, every input class in x and dy), ResNet-50's layers whose reductions
// take the split, the fold chunks of 32 terms and the centring (sampled), and EfficientNet's 1x1
// 40->240 at 28x28 in the swapped orientation. Bitwise reproducibility: determinism_test, over the
// registry. Needs a GPU: without one every case fails with the plan's error.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32_backward_testing.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "tools/lab/lab.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "implicit_gemm_wgmma";
// The lab's variants with wgrad's form forced (implicit_gemm_wgmma_wgrad.h): its own GEMM on
// every shape, the im2col form on those it takes, whichever the model picks.
constexpr char kGemm[] = "implicit_gemm_wgmma_wgrad_gemm";
constexpr char kIm2col[] = "implicit_gemm_wgmma_wgrad_im2col";

// The algorithms that compute wgrad of s here: the rule's, the GEMM's, and the im2col form's
// where it takes s.
std::vector<const char*> Forms(const Shape& s, int* im2col) {
  std::vector<const char*> v = {kAlgorithm, kGemm};
  if (Plan::Create(s, kIm2col).ok()) {
    v.push_back(kIm2col);
    ++*im2col;
  }
  return v;
}
[[maybe_unused]] const bool kLabRegistered = RegisterLabAlgorithms().ok();

using implicit_gemm_3xtf32_backward_testing::AsOp;
using implicit_gemm_3xtf32_backward_testing::BackwardShapes;
using implicit_gemm_3xtf32_backward_testing::Resnet64;

TEST(ImplicitGemmWgmmaWgradGpuTest, HasDevice) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  ASSERT_TRUE(err == cudaSuccess && n > 0)
      << "this test needs a CUDA GPU: " << (err == cudaSuccess ? "0 devices" : cudaGetErrorString(err));
}

// The replay's shapes, every element, and every input class in x and dy; the depthwise ones
// (groups of one input channel) are declined, with a reason, and left to the depthwise algorithm.
TEST(ImplicitGemmWgmmaWgradGpuTest, ReplayShapes) {
  int declined = 0, im2col = 0;
  for (const Shape& base : BackwardShapes()) {
    const Shape s = AsOp(base, Op::kWgrad);
    SCOPED_TRACE(s.ToString());
    if (s.grouped() && s.in_per_group() == 1) {
      const absl::StatusOr<Plan> plan = Plan::Create(s, kAlgorithm);
      ASSERT_FALSE(plan.ok());
      EXPECT_NE(std::string(plan.status().message()).find("depthwise"), std::string::npos)
          << plan.status();
      ++declined;
      continue;
    }
    for (const char* alg : Forms(s, &im2col)) {
      SCOPED_TRACE(alg);
      ExpectMatchesReference(s, alg, int64_t{1} << 20);
      ExpectEveryClassWithinBar(s, alg, 7);
    }
  }
  EXPECT_GT(declined, 0) << "the replay's shapes no longer include a depthwise one";
  EXPECT_GE(im2col, 8) << "too few shapes exercise the im2col form";
}

// ResNet-50's layers at batch 32 (each BN, 1x1 and 3x3, stride 2, the 56x56 reductions past
// wgrad_split::kCenterK that take 32-term chunks and the centring, the 7x7 outputs that the
// im2col form takes), a bias, and one EfficientNet layer that the model swaps (CanSwapWgrad).
std::vector<Shape> LargeCases() {
  Shape biased = AsOp(Shape{32, 64, 256, 56, 56, 1, 1}, Op::kWgrad);
  biased.has_bias = true;  // db by Plan::Run's fixed-order pass beside the kernel's dw
  return {Resnet64(Op::kWgrad),
          biased,
          AsOp(Shape{32, 256, 64, 56, 56, 1, 1}, Op::kWgrad),
          AsOp(WithGeometry({32, 128, 128, 28, 28, 3, 3}, 1, 1, 1, 1, 1, 1), Op::kWgrad),
          AsOp(WithGeometry({32, 256, 512, 56, 56, 1, 1}, 0, 0, 0, 0, 2, 2), Op::kWgrad),
          AsOp(WithGeometry({32, 512, 512, 7, 7, 3, 3}, 1, 1, 1, 1, 1, 1), Op::kWgrad),
          // 7x7 outputs: the im2col form (K = 1,568), strided, and a 1x1 with a bias.
          AsOp(WithGeometry({32, 512, 512, 14, 14, 3, 3}, 1, 1, 1, 1, 2, 2), Op::kWgrad),
          AsOp(WithGeometry({32, 2048, 512, 7, 7, 1, 1}, 0, 0, 0, 0, 1, 1, 1, 1, 1, true),
               Op::kWgrad),
          AsOp(Shape{32, 16, 96, 112, 112, 1, 1}, Op::kWgrad),
          AsOp(Shape{32, 40, 240, 28, 28, 1, 1}, Op::kWgrad)};  // swapped
}

TEST(ImplicitGemmWgmmaWgradLarge, ResnetLayers) {
  int im2col = 0;
  for (const Shape& s : LargeCases()) {
    SCOPED_TRACE(s.ToString());
    for (const char* alg : Forms(s, &im2col)) {
      SCOPED_TRACE(alg);
      ExpectMatchesReference(s, alg, 4096);
      ExpectEveryClassWithinBar(s, alg, 9);
    }
  }
  EXPECT_EQ(im2col, 3) << "ResNet's 7x7-output layers";
}

}  // namespace
}  // namespace conv2d
