// Every bad input through the C ABI gives its code and message, never a crash, and leaves the
// caller's memory alone. With a GPU the run-time checks are exercised for real.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <cstdint>
#include <vector>

#include "conv/conv2d_c.h"
#include "gtest/gtest.h"

namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

bool Says(const char* text) { return std::strstr(conv2d_last_error(), text) != nullptr; }

TEST(CApiTest, BadShapes) {
  conv2d_plan* plan = reinterpret_cast<conv2d_plan*>(0x1);
  EXPECT_EQ(conv2d_plan_create(0, 3, 3, 8, 8, 3, 3, "auto", &plan), CONV2D_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_TRUE(Says("batch must be positive")) << conv2d_last_error();
  EXPECT_EQ(conv2d_plan_create(1, -1, 3, 8, 8, 3, 3, "auto", &plan), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("in_channels")) << conv2d_last_error();
  EXPECT_EQ(conv2d_plan_create(1, 3, 3, 8, 8, 9, 3, nullptr, &plan), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("larger than the image")) << conv2d_last_error();
  EXPECT_EQ(conv2d_plan_create(1, 3, 3, 8, 8, 3, 3, "auto", nullptr), CONV2D_INVALID_ARGUMENT);
}

TEST(CApiTest, UnknownAlgorithm) {
  conv2d_plan* plan = nullptr;
  EXPECT_EQ(conv2d_plan_create(1, 3, 3, 8, 8, 3, 3, "fastest_ever", &plan), CONV2D_NOT_FOUND);
  EXPECT_TRUE(Says("fastest_ever")) << conv2d_last_error();
  EXPECT_EQ(plan, nullptr);
}

TEST(CApiTest, NullPlan) {
  size_t bytes = 7;
  EXPECT_EQ(conv2d_plan_workspace_size(nullptr, &bytes), CONV2D_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 7u);
  EXPECT_EQ(conv2d_plan_run(nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr),
            CONV2D_INVALID_ARGUMENT);
  EXPECT_EQ(conv2d_plan_algorithm(nullptr), nullptr);
  conv2d_plan_destroy(nullptr);
}

TEST(CApiTest, AlgorithmNames) {
  ASSERT_GE(conv2d_algorithm_count(), 2);
  EXPECT_STREQ(conv2d_algorithm_name(0), "direct");
  EXPECT_EQ(conv2d_algorithm_name(-1), nullptr);
  EXPECT_EQ(conv2d_algorithm_name(conv2d_algorithm_count()), nullptr);
}

TEST(CApiTest, NoDeviceOrRunTimeErrors) {
  conv2d_plan* plan = nullptr;
  if (!HaveGpu()) {
    std::printf("NOTE: no CUDA device here: checking the 'no CUDA device' error only. The "
                "run-time checks run in the GPU bundle.\n");
    EXPECT_EQ(conv2d_plan_create(1, 3, 3, 8, 8, 3, 3, "auto", &plan), CONV2D_FAILED_PRECONDITION);
    EXPECT_TRUE(Says("no CUDA device")) << conv2d_last_error();
    EXPECT_EQ(plan, nullptr);
    return;
  }
  // For every algorithm: null pointers and a short workspace are refused and y stays untouched.
  // 3x3: every variant of the basic form takes it (depthwise computes another family)
  const int64_t B = 1, C = 3, H = 40, K = 3, OH = H - K + 1;
  const size_t ny = B * C * OH * OH;
  float *x, *w, *y;
  ASSERT_EQ(cudaMalloc(&x, B * C * H * H * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w, C * C * K * K * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, ny * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(x, 0, B * C * H * H * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(w, 0, C * C * K * K * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(y, 0x5A, ny * 4), cudaSuccess);
  int with_workspace = 0;
  for (int a = 0; a < conv2d_algorithm_count(); ++a) {
    const char* name = conv2d_algorithm_name(a);
    SCOPED_TRACE(name);
    if (std::string(name) == "depthwise") continue;  // the family of Cin/groups = 1 only
    ASSERT_EQ(conv2d_plan_create(B, C, C, H, H, K, K, name, &plan), CONV2D_OK)
        << conv2d_last_error();
    size_t ws_bytes = 0;
    ASSERT_EQ(conv2d_plan_workspace_size(plan, &ws_bytes), CONV2D_OK);
    void* ws = nullptr;
    if (ws_bytes) {
      ASSERT_EQ(cudaMalloc(&ws, ws_bytes + 16), cudaSuccess);  // room for a misaligned copy
    }
    EXPECT_EQ(conv2d_plan_run(plan, nullptr, w, y, ws, ws_bytes, nullptr), CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says("x is null")) << conv2d_last_error();
    EXPECT_EQ(conv2d_plan_run(plan, x, nullptr, y, ws, ws_bytes, nullptr), CONV2D_INVALID_ARGUMENT);
    EXPECT_EQ(conv2d_plan_run(plan, x, w, nullptr, ws, ws_bytes, nullptr), CONV2D_INVALID_ARGUMENT);
    if (ws_bytes) {
      ++with_workspace;
      EXPECT_EQ(conv2d_plan_run(plan, x, w, y, ws, ws_bytes - 1, nullptr),
                CONV2D_INVALID_ARGUMENT);
      EXPECT_TRUE(Says("workspace too small")) << conv2d_last_error();
      EXPECT_EQ(conv2d_plan_run(plan, x, w, y, nullptr, ws_bytes, nullptr),
                CONV2D_INVALID_ARGUMENT);
    }
    // Pointers that would fault the kernel, and with it the caller's context, are refused:
    // misaligned for a float, or pageable host memory the GPU cannot read.
    auto shifted = [](const void* p) {
      return reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(p) + 1);
    };
    EXPECT_EQ(conv2d_plan_run(plan, shifted(x), w, y, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says("x") && Says("not aligned")) << conv2d_last_error();
    EXPECT_EQ(conv2d_plan_run(plan, x, shifted(w), y, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    EXPECT_EQ(conv2d_plan_run(plan, x, w, shifted(y), ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    std::vector<float> pageable_x(B * C * H * H, 1.0f), pageable_y(ny, 7.0f);
    EXPECT_EQ(conv2d_plan_run(plan, pageable_x.data(), w, y, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says("pageable")) << conv2d_last_error();
    EXPECT_EQ(conv2d_plan_run(plan, x, w, pageable_y.data(), ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    for (float v : pageable_y) ASSERT_EQ(v, 7.0f) << "a refused host y was written";
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<unsigned> host(ny);
    ASSERT_EQ(cudaMemcpy(host.data(), y, ny * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (unsigned v : host) ASSERT_EQ(v, 0x5A5A5A5Au) << "y was written on error";
    // And a valid run succeeds.
    EXPECT_EQ(conv2d_plan_run(plan, x, w, y, ws, ws_bytes, nullptr), CONV2D_OK)
        << conv2d_last_error();
    // The workspace needs no alignment of its own: each runner aligns within it.
    if (ws_bytes) {
      EXPECT_EQ(conv2d_plan_run(plan, x, w, y, static_cast<char*>(ws) + 4, ws_bytes, nullptr),
                CONV2D_OK)
          << conv2d_last_error();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemset(y, 0x5A, ny * 4), cudaSuccess);
    cudaFree(ws);
    conv2d_plan_destroy(plan);
  }
  EXPECT_GE(with_workspace, 1) << "no algorithm with a workspace: the short-workspace check "
                                  "was not exercised";
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
}

}  // namespace
