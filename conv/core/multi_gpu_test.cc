// Plans bound to their device, on a host with two or more GPUs (issue 24): plans of several
// algorithms made on every device and run concurrently from two threads per device, each with
// its own stream and workspace, every output checked against the fp64 reference; a pointer of
// another device, or another device current, refused with nothing written. Fails (does not skip)
// on a host with fewer than two GPUs: tools/gpu_run.sh runs it only in its multi_gpu step.
#include <cuda_runtime_api.h>

#include <cmath>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv/conv.h"
#include "conv/core/device_buffer.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// One shape per family auto picks on an H200: the FFT (the Hopper channel mix, whose setup was
// once made for the first GPU only), the implicit GEMM with geometry, depthwise with a bias.
std::vector<Shape> Shapes() {
  Shape wgmma{2, 32, 48, 28, 28, 3, 3};
  wgmma.pad_top = wgmma.pad_bottom = wgmma.pad_left = wgmma.pad_right = 1;
  Shape depthwise{2, 16, 16, 30, 30, 5, 5};
  depthwise.groups = 16;
  depthwise.pad_top = depthwise.pad_bottom = depthwise.pad_left = depthwise.pad_right = 2;
  depthwise.has_bias = true;
  return {Shape{2, 64, 64, 128, 128, 16, 16}, wgmma, depthwise};
}

TEST(MultiGpuTest, PlansOnEveryDeviceRunConcurrently) {
  const int devices = DeviceCount();
  ASSERT_GE(devices, 2) << "FAILED: this test needs two GPUs; this host has " << devices;
  const std::vector<Shape> shapes = Shapes();
  std::vector<std::string> errors;
  std::mutex mu;
  auto fail = [&](std::string e) {
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back(std::move(e));
  };
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d) {
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, d, t] {
        if (cudaSetDevice(d) != cudaSuccess) return fail(absl::StrCat("cudaSetDevice ", d));
        cudaStream_t stream;
        if (cudaStreamCreate(&stream) != cudaSuccess) return fail("cudaStreamCreate");
        for (int i = 0; i < 3; ++i) {
          for (const Shape& s : shapes) {
            auto plan = Plan::Create(s, "auto");
            if (!plan.ok()) return fail(plan.status().ToString());
            if (plan->device() != d) return fail(absl::StrCat("plan on ", plan->device()));
            auto problem = DeviceProblem::Create(s, 1000 * d + 100 * t + i);
            auto ws = DeviceBuffer::Allocate(plan->workspace_bytes() + 1);
            if (!problem.ok() || !ws.ok()) return fail("allocation");
            Expected expected = ReferenceFor(*problem, 4096, 7);
            if (!problem->PoisonOutput().ok()) return fail("poison");
            absl::Status st = plan->Run(problem->x(), problem->w(), problem->bias(),
                                        problem->y(), ws->p, plan->workspace_bytes(), stream);
            if (!st.ok()) return fail(absl::StrCat(s.ToString(), " on ", d, ": ", st.ToString()));
            if (cudaStreamSynchronize(stream) != cudaSuccess) return fail("synchronize");
            auto y = problem->ReadOutput(expected.positions);
            if (!y.ok()) return fail(y.status().ToString());
            Comparison c = Compare(*y, expected.y64, expected.positions, 1e-3, 1e-3);
            if (!c.ok()) {
              return fail(absl::StrCat(s.ToString(), " (", plan->algorithm(), ") on device ", d,
                                       " thread ", t, ": ", c.ToString()));
            }
          }
        }
        cudaStreamDestroy(stream);
      });
    }
  }
  for (auto& th : threads) th.join();
  for (const std::string& e : errors) ADD_FAILURE() << e;
}

TEST(MultiGpuTest, MismatchedDevicesAreRefusedWithNothingWritten) {
  const int devices = DeviceCount();
  ASSERT_GE(devices, 2) << "FAILED: this test needs two GPUs; this host has " << devices;
  const Shape s{1, 8, 8, 32, 32, 3, 3};
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto plan = Plan::Create(s, "auto");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto here = DeviceProblem::Create(s, 1);
  auto ws = DeviceBuffer::Allocate(plan->workspace_bytes() + 1);
  ASSERT_TRUE(here.ok() && ws.ok());
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  auto there = DeviceProblem::Create(s, 2);
  ASSERT_TRUE(there.ok());
  ASSERT_TRUE(there->PoisonOutput().ok());

  // Device 1 current, the plan made on device 0: FailedPrecondition, y untouched.
  absl::Status st = plan->Run(there->x(), there->w(), there->y(), ws->p,
                              plan->workspace_bytes(), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(here->PoisonOutput().ok());
  // x, then y, then the workspace on device 1: InvalidArgument, nothing written.
  st = plan->Run(there->x(), here->w(), here->y(), ws->p, plan->workspace_bytes(), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  st = plan->Run(here->x(), here->w(), there->y(), ws->p, plan->workspace_bytes(), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  auto ws1 = DeviceBuffer::Allocate(plan->workspace_bytes() + 1);
  ASSERT_TRUE(ws1.ok());
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  if (plan->workspace_bytes() > 0) {
    st = plan->Run(here->x(), here->w(), here->y(), ws1->p, plan->workspace_bytes(), nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (const DeviceProblem* p : {&*here, &*there}) {
    if (p == &*there) ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    auto y = p->ReadOutput({});
    ASSERT_TRUE(y.ok());
    int64_t written = 0;
    for (float v : *y) written += !std::isnan(v);
    EXPECT_EQ(written, 0) << "a refused run wrote " << written << " outputs";
  }
}

}  // namespace
}  // namespace conv2d
