// conv2d used from another Bazel repository. Without a GPU it checks what can be checked (shape
// validation, algorithm choice, the "no CUDA device" error) and says so; with one it runs a
// convolution and compares it with the fp64 reference.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "conv/conv.h"
#include "conv/conv2d_c.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

TEST(ConsumerTest, UsesTheLibrary) {
  const conv2d::Shape shape{2, 3, 5, 20, 18, 3, 4};
  ASSERT_TRUE(conv2d::ValidateShape(shape).ok());
  EXPECT_FALSE(conv2d::Algorithms().empty());
  absl::StatusOr<std::string> chosen = conv2d::ChooseAlgorithm(shape);
  ASSERT_TRUE(chosen.ok()) << chosen.status();

  conv2d_plan* cplan = nullptr;
  EXPECT_EQ(conv2d_plan_create(1, 1, 1, 4, 4, 5, 5, "auto", &cplan), CONV2D_INVALID_ARGUMENT);

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("NOTE: no CUDA device: checked the API and the 'no CUDA device' error only.\n");
    EXPECT_EQ(conv2d::Plan::Create(shape).status().code(),
              absl::StatusCode::kFailedPrecondition);
    return;
  }
  absl::StatusOr<conv2d::Plan> plan = conv2d::Plan::Create(shape);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const auto x = conv2d::RandomTensor(5, conv2d::kInputTensor, shape.input_elements());
  const auto w = conv2d::RandomTensor(5, conv2d::kFilterTensor, shape.filter_elements());
  float *dx, *dw, *dy;
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, shape.output_elements() * 4), cudaSuccess);
  if (plan->workspace_bytes()) ASSERT_EQ(cudaMalloc(&ws, plan->workspace_bytes()), cudaSuccess);
  cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
  cudaMemset(dy, 0xFF, shape.output_elements() * 4);
  ASSERT_TRUE(plan->Run(dx, dw, dy, ws, plan->workspace_bytes(), nullptr).ok());
  std::vector<float> y(shape.output_elements());
  ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  const auto y64 = conv2d::ReferenceConv(shape, x.data(), w.data());
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_LE(std::abs(y[i] - y64[i]), 1e-3 + 1e-3 * std::abs(y64[i])) << i;
  }
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dy);
  cudaFree(ws);
}
