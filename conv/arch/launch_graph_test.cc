// LaunchGraphs on a GPU: a recorded chain of PDL kernels replayed through one graph per stream
// with each call's arguments (results checked on every call, the graph launches counted), the
// slots' limit, a stream under the caller's own capture (plain launches into the caller's graph),
// each thread's per-thread stream; and plans of every runner that records its launches, whose
// graph-launched output must equal the same call launched plainly (inside a capture of the
// test's own), on new buffers each call. Needs a GPU.
#include "conv/arch/launch_graph.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv/arch/launch_graph_test_kernels.h"
#include "conv/conv.h"
#include "conv/core/device_buffer.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr int kN = 1 << 16;

class Chain {
 public:
  Chain() {
    for (float** p : {&a_, &b_, &c_}) {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(p), kN * sizeof(float)), cudaSuccess);
    }
  }
  ~Chain() {
    for (float* p : {a_, b_, c_}) cudaFree(p);
  }
  // Records the chain with `scale` and enqueues it through `graphs` on `stream`.
  cudaError_t Run(LaunchGraphs& graphs, float scale, cudaStream_t stream) {
    LaunchRecording r(stream);
    const cudaError_t err = EnqueueChain(scale, a_, b_, c_, kN, stream);
    if (err != cudaSuccess) return err;
    EXPECT_EQ(r.size(), 3);
    return graphs.Launch(r);
  }
  // c[i] == 2 * (i * scale + 1) everywhere, after `stream` completes.
  void Expect(float scale, cudaStream_t stream) {
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> c(kN);
    ASSERT_EQ(cudaMemcpy(c.data(), c_, kN * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    int bad = 0;
    for (int i = 0; i < kN; ++i) bad += c[i] != 2.0f * (static_cast<float>(i) * scale + 1.0f);
    EXPECT_EQ(bad, 0) << "scale " << scale;
  }
  // On the chain's stream: a non-blocking stream does not wait for the legacy one's memset.
  void Poison(cudaStream_t stream) {
    ASSERT_EQ(cudaMemsetAsync(c_, 0xff, kN * sizeof(float), stream), cudaSuccess);
  }

 private:
  float *a_ = nullptr, *b_ = nullptr, *c_ = nullptr;
};

TEST(LaunchGraphsTest, OneGraphServesEveryCallWithItsOwnArguments) {
  ASSERT_TRUE(LaunchGraphs::Enabled()) << "CONV2D_GRAPHS=0 is set: the graph path is off";
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  LaunchGraphs graphs;
  Chain first, second;  // alternate buffers as well as scales
  const unsigned long long launched = LaunchGraphs::Launches();
  for (int call = 0; call < 60; ++call) {
    // Three calls alike (the graph's nodes then keep their arguments), then other buffers and
    // another scale.
    Chain& chain = (call / 3) % 2 ? second : first;
    const float scale = 0.5f + call / 3;
    chain.Poison(stream);
    ASSERT_EQ(chain.Run(graphs, scale, stream), cudaSuccess);
    chain.Expect(scale, stream);
  }
  EXPECT_EQ(graphs.graphs(), 1);
  EXPECT_EQ(LaunchGraphs::Launches() - launched, 60u);
  cudaStreamDestroy(stream);
}

TEST(LaunchGraphsTest, AGraphPerStreamUpToTheSlotsThenPlainLaunches) {
  constexpr int kStreams = LaunchGraphs::kSlots + 2;
  cudaStream_t streams[kStreams];
  for (cudaStream_t& s : streams) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  }
  LaunchGraphs graphs;
  Chain chains[kStreams];
  for (int round = 0; round < 3; ++round) {
    for (int s = 0; s < kStreams; ++s) {
      chains[s].Poison(streams[s]);
      ASSERT_EQ(chains[s].Run(graphs, 3.0f * s + round, streams[s]), cudaSuccess);
    }
    for (int s = 0; s < kStreams; ++s) chains[s].Expect(3.0f * s + round, streams[s]);
  }
  EXPECT_EQ(graphs.graphs(), LaunchGraphs::kSlots);
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
}

TEST(LaunchGraphsTest, ACapturedStreamGetsPlainLaunchesInTheCallersGraph) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  LaunchGraphs graphs;
  Chain chain;
  const unsigned long long launched = LaunchGraphs::Launches();
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const cudaError_t err = chain.Run(graphs, 7.0f, stream);
  cudaGraph_t captured = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &captured), cudaSuccess);
  ASSERT_EQ(err, cudaSuccess);
  EXPECT_EQ(graphs.graphs(), 0);
  EXPECT_EQ(LaunchGraphs::Launches(), launched);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(captured, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 3u);  // the three kernels, not a graph launch
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, captured, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    chain.Poison(stream);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    chain.Expect(7.0f, stream);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(captured);
  cudaStreamDestroy(stream);
}

// cudaStreamPerThread is one handle for a different stream in each thread: each thread's calls
// must get a graph of their own (a shared one would order one thread's launches behind the
// other's), so two threads make two graphs.
TEST(LaunchGraphsTest, EachThreadsPerThreadStreamGetsItsOwnGraph) {
  LaunchGraphs graphs;
  std::mutex serialize;  // LaunchGraphs is serialized by its caller (Plan::Run's lock)
  Chain chains[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        const float scale = 5.0f * t + round;
        chains[t].Poison(cudaStreamPerThread);
        {
          std::lock_guard<std::mutex> lock(serialize);
          ASSERT_EQ(chains[t].Run(graphs, scale, cudaStreamPerThread), cudaSuccess);
        }
        chains[t].Expect(scale, cudaStreamPerThread);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(graphs.graphs(), 2);
}

// Shapes whose plans (auto's pick, or the named algorithm) record their launches.
struct PlanCase {
  Shape shape;
  const char* algorithm;
  bool records = true;  // false where auto may pick a runner that does not record
};

std::vector<PlanCase> PlanCases() {
  Shape biased_fft{2, 8, 12, 40, 36, 9, 9};
  biased_fft.has_bias = true;
  Shape padded{3, 16, 24, 20, 18, 3, 3};
  padded.pad_top = padded.pad_bottom = padded.pad_left = padded.pad_right = 1;
  padded.has_bias = true;
  Shape depthwise{2, 32, 32, 28, 28, 3, 3};
  depthwise.groups = 32;
  depthwise.pad_top = depthwise.pad_bottom = depthwise.pad_left = depthwise.pad_right = 1;
  Shape large_dw{1, 16, 16, 56, 56, 31, 31};
  large_dw.groups = 16;
  large_dw.pad_top = large_dw.pad_bottom = large_dw.pad_left = large_dw.pad_right = 15;
  large_dw.has_bias = true;
  Shape pointwise{32, 96, 48, 5, 5, 5, 5};  // dot: one output pixel per (image, channel)
  pointwise.has_bias = true;
  return {
      {Shape{1, 8, 8, 16, 16, 3, 3}, "implicit_gemm_wgmma"},  // one launch (in-kernel split)
      {padded, "implicit_gemm_wgmma"},                       // split kernel, then the GEMM
      {Shape{2, 16, 16, 64, 64, 8, 8}, "fft_fused_3xtf32"},    // four launches
      {biased_fft, "fft_fused_3xtf32"},                       // and the bias pass
      {pointwise, "dot"},
      {depthwise, "depthwise"},
      {large_dw, "fft_depthwise"},
      {Shape{4, 64, 64, 128, 128, 8, 8}, "auto", false},  // KernelBot case 1
  };
}

// Each recording runner's plan through its graph against the same call launched plainly (inside
// a capture of the test's own, where the library launches plainly), on new buffers each call (the
// graph's nodes updated): equal but for summation order (stream-K tails and the FFT's shared
// atomics add in any order), every output written, and the calls made as graph launches.
TEST(LaunchGraphsTest, PlansGiveTheSameResultsThroughTheGraphAsLaunchedPlainly) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (const PlanCase& c : PlanCases()) {
    SCOPED_TRACE(absl::StrCat(c.algorithm, " ", c.shape.ToString()));
    absl::StatusOr<Plan> plan = Plan::Create(c.shape, c.algorithm);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<DeviceBuffer> ws = DeviceBuffer::Allocate(plan->workspace_bytes() + 1);
    ASSERT_TRUE(ws.ok());
    std::vector<DeviceProblem> problems;  // all alive at once: every call has its own buffers
    for (int call = 0; call < 3; ++call) {
      absl::StatusOr<DeviceProblem> p = DeviceProblem::Create(c.shape, 100 + call);
      ASSERT_TRUE(p.ok()) << p.status();
      problems.push_back(std::move(*p));
    }
    const unsigned long long launched = LaunchGraphs::Launches();
    for (int call = 0; call < 3; ++call) {
      const DeviceProblem& p = problems[call];
      ASSERT_TRUE(p.PoisonOutput().ok());
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      const absl::Status captured_run =
          plan->Run(p.x(), p.w(), p.bias(), p.y(), ws->p, plan->workspace_bytes(), stream);
      cudaGraph_t graph = nullptr;
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      ASSERT_TRUE(captured_run.ok()) << captured_run;
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      absl::StatusOr<std::vector<float>> plain = p.ReadOutput({});
      ASSERT_TRUE(plain.ok());

      ASSERT_TRUE(p.PoisonOutput().ok());
      const absl::Status run =
          plan->Run(p.x(), p.w(), p.bias(), p.y(), ws->p, plan->workspace_bytes(), stream);
      ASSERT_TRUE(run.ok()) << run;
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      absl::StatusOr<std::vector<float>> graphed = p.ReadOutput({});
      ASSERT_TRUE(graphed.ok());
      ASSERT_EQ(plain->size(), graphed->size());
      int64_t differ = 0, unwritten = 0;
      for (size_t i = 0; i < graphed->size(); ++i) {
        const float a = (*plain)[i], b = (*graphed)[i];
        unwritten += !(b == b);
        differ += !(std::fabs(a - b) <= 1e-5f + 1e-5f * std::fabs(a));
      }
      EXPECT_EQ(unwritten, 0) << "call " << call;
      EXPECT_EQ(differ, 0) << "call " << call;
    }
    if (c.records) EXPECT_EQ(LaunchGraphs::Launches() - launched, 3u);
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace conv2d
