// Every operation of every algorithm (and auto) gives bitwise the same result for the same inputs
// on every call: the workspace refilled with other bytes between calls, the output poisoned, the
// calls on two streams, on randn and on the classes whose data changes an algorithm's path
// (outliers and a large mean turn on fp32 atomics where an algorithm has any). conv.h promises it.
// The lab's forced variants of the library's algorithms too (wgrad's im2col form and its GEMM,
// dgrad's phases and fold, depthwise's staged and streaming kernels, the filter split's two
// paths), so that every path auto may take is checked whichever it takes here. A last call
// writes its outputs 4 bytes past a 16-byte boundary (the library asks for 4-byte alignment
// only), between two canary words that must stay as they were: the kernels' vector stores and
// their scalar fallbacks (dx_pass.cuh) give the same bits.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "conv/conv.h"
#include "conv/core/device_buffer.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"
#include "tools/lab/lab.h"

namespace conv2d {
namespace {

Shape Geo(Shape s, int64_t pad, int64_t stride, int64_t groups, bool bias) {
  s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = pad;
  s.stride_h = s.stride_w = stride;
  s.groups = groups;
  s.has_bias = bias;
  return s;
}

// Bits equal, every NaN counted equal to every NaN (payloads are not promised).
int64_t Differences(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != a[i] && b[i] != b[i]) continue;
    n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return n;
}

// `plan` once more with its outputs (Written's order, one after another) at 4 bytes past a
// 16-byte boundary of a fresh buffer, a canary word either side: the outputs equal `first`, the
// canaries unchanged.
void ExpectSameBitsMisaligned(const Plan& plan, const DeviceProblem& p,
                              const std::vector<float>& first, void* workspace,
                              cudaStream_t stream) {
  const Shape& s = p.shape();
  const int64_t n = s.written_elements();
  constexpr uint32_t kCanary = 0x7F7F7F7Fu;  // ~3.4e38, finite: no output of these data
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate((n + 2) * sizeof(float));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(cudaMemset(out->p, 0x7F, (n + 2) * sizeof(float)), cudaSuccess);
  float* const at = static_cast<float*>(out->p) + 1;
  Tensors t = p.tensors();
  switch (s.op) {
    case Op::kFprop: t.y = at; break;
    case Op::kDgrad: t.dx = at; break;
    case Op::kWgrad:
      t.dw = at;
      if (s.has_bias) t.db = at + s.filter_elements();
      break;
  }
  ASSERT_TRUE(plan.Run(t, workspace, plan.workspace_bytes(), stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<float> got(n + 2);
  ASSERT_EQ(cudaMemcpy(got.data(), out->p, (n + 2) * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  uint32_t before, after;
  std::memcpy(&before, &got[0], 4);
  std::memcpy(&after, &got[n + 1], 4);
  EXPECT_EQ(before, kCanary) << plan.algorithm() << " " << s.ToString() << ": wrote before y";
  EXPECT_EQ(after, kCanary) << plan.algorithm() << " " << s.ToString() << ": wrote past y";
  const std::vector<float> mid(got.begin() + 1, got.begin() + 1 + n);
  EXPECT_EQ(Differences(first, mid), 0)
      << plan.algorithm() << " " << s.ToString() << ": outputs 4 bytes past 16 differ";
}

[[maybe_unused]] const bool kLabRegistered = RegisterLabAlgorithms().ok();

TEST(DeterminismTest, EveryAlgorithmEveryOperation) {
  const std::vector<Shape> shapes = {
      Geo(Shape{16, 32, 64, 32, 32, 3, 3}, 1, 2, 1, false),  // the stream-K shape of issue 41
      Geo(Shape{8, 64, 64, 28, 28, 3, 3}, 1, 1, 1, true),
      Shape{4, 96, 128, 14, 14, 1, 1},
      Shape{2, 16, 16, 64, 64, 9, 9},                        // the FFT's
      Geo(Shape{8, 48, 48, 28, 28, 7, 7}, 3, 1, 48, true),   // depthwise
      Geo(Shape{2, 12, 20, 23, 19, 5, 3}, 2, 2, 4, false),
      Geo(Shape{2, 3, 64, 58, 58, 7, 7}, 3, 2, 1, false),    // a stem: dgrad by the fold
      Geo(Shape{8, 48, 96, 28, 28, 3, 3}, 1, 2, 48, false),  // strided depthwise: depthwise_dgrad
      Geo(Shape{8, 64, 96, 28, 28, 2, 2}, 0, 2, 1, true),    // taps apart: dgrad by the fold
  };
  std::vector<std::string> names = {"auto"};
  for (const std::string& n : Algorithms()) {
    // Not the oracle (seconds a call, and fp64 sums anyway), nor the lab's cuFFT + cuBLAS
    // baselines (fft_tiled*: not the library's kernels; their reproducibility is those
    // libraries' to promise).
    if (n != "direct" && n.rfind("fft_tiled", 0) != 0) names.push_back(n);
  }
  cudaStream_t streams[2];
  ASSERT_EQ(cudaStreamCreate(&streams[0]), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&streams[1]), cudaSuccess);
  int checked = 0;
  for (const Shape& base : shapes) {
    for (Op op : kAllOps) {
      Shape s = base;
      s.op = op;
      if (op == Op::kDgrad) s.has_bias = false;
      for (InputClass c : {InputClass::kRandn, InputClass::kOutlierX, InputClass::kLargeMean}) {
        Inputs in = MakeInputs(s, 17, c);
        std::vector<float> bias(op == Op::kFprop ? s.bias_elements() : 0, 0.25f);
        absl::StatusOr<DeviceProblem> p = DeviceProblem::FromHost(
            s, std::move(in.x), std::move(in.w), std::move(bias), std::move(in.dy));
        ASSERT_TRUE(p.ok()) << p.status();
        for (const std::string& name : names) {
          absl::StatusOr<Plan> plan = Plan::Create(s, name);
          if (!plan.ok()) continue;  // the algorithm does not take it: said elsewhere
          absl::StatusOr<DeviceBuffer> ws = DeviceBuffer::Allocate(plan->workspace_bytes() + 64);
          ASSERT_TRUE(ws.ok()) << ws.status();
          std::vector<float> first;
          for (int call = 0; call < 3; ++call) {
            if (plan->workspace_bytes() > 0) {
              ASSERT_EQ(cudaMemset(ws->p, call == 0 ? 0x00 : call == 1 ? 0xFF : 0x3C,
                                   plan->workspace_bytes() + 64),
                        cudaSuccess);
            }
            ASSERT_TRUE(p->PoisonOutput().ok());
            void* at = static_cast<char*>(ws->p) + 4 * call;  // a different offset each call
            ASSERT_TRUE(
                plan->Run(p->tensors(), at, plan->workspace_bytes(), streams[call % 2]).ok());
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            absl::StatusOr<std::vector<float>> out = p->ReadOutput({});
            ASSERT_TRUE(out.ok()) << out.status();
            if (call == 0) {
              first = *std::move(out);
              continue;
            }
            EXPECT_EQ(Differences(first, *out), 0)
                << name << " (" << plan->algorithm() << ") " << s.ToString() << " "
                << InputClassName(c) << ": call " << call + 1 << " differs from the first";
          }
          ASSERT_NO_FATAL_FAILURE(ExpectSameBitsMisaligned(*plan, *p, first, ws->p, streams[0]));
          ++checked;
        }
      }
    }
  }
  std::printf("determinism: %d (algorithm, shape, operation, class) runs of 3 calls compared\n",
              checked);
  EXPECT_GT(checked, 100);
  cudaStreamDestroy(streams[0]);
  cudaStreamDestroy(streams[1]);
}

}  // namespace
}  // namespace conv2d
