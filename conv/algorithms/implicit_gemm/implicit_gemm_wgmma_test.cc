// implicit_gemm_wgmma on the GPU against the fp64 reference (seeded inputs, NaN-poisoned output):
// the edge shapes, the KernelBot test shapes, shapes that pick each tile width, gather path and
// overhang, all elements, uniform and normal inputs; the long KernelBot reductions and the "cnn"
// shapes at 4096 sampled positions; inputs changed between calls; and (not pass/fail) the
// effective TFLOP/s on the cnn shapes. Grids with a partial last round take a stream-K tail
// (pieces added through the workspace in k order: edge shapes of 8 or more k-tiles,
// (32,512,512,9,3), (32,256,256,14,3), ...), others whole tiles only, so both kernel builds and
// both epilogues are covered; every case again with a bias; the in-kernel filter split (the
// lab's forced variant) on every case it takes, bit for bit against the split kernel;
// repeated calls bit for bit the same, whatever the workspace and y held before, calls back to
// back, another stream; and infinities in x giving the infinities of fp32 summation. Needs a Hopper GPU: elsewhere main() fails (no device) or every case
// fails with Initialize's FailedPrecondition (not sm_90).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_testing.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_internal.h"
#include "conv/core/device_buffer.h"
#include "conv/core/registry.h"
#include "conv/core/transposed_dgrad.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"
#include "reference/random.h"
#include "tools/lab/lab.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "implicit_gemm_wgmma";
// The lab's forced filter splits, registered below.
constexpr char kInKernelSplit[] = "implicit_gemm_wgmma_split_in_kernel";
constexpr char kSplitKernel[] = "implicit_gemm_wgmma_split_kernel";
[[maybe_unused]] const bool kLabRegistered = RegisterLabAlgorithms().ok();

using implicit_gemm_testing::Case;

// The shared cases (implicit_gemm_testing.h), shapes that pick each tile width (Cout <= 32: 32,
// <= 64: 64, else 128), the 16-byte input gather and overhang in M, N and K, and the "cnn" suite.
std::vector<Case> Cases() {
  return implicit_gemm_testing::GpuCases(
      {
          Shape{2, 8, 24, 8, 12, 1, 1},    // BN 32, vector A
          Shape{1, 9, 33, 14, 13, 3, 3},   // BN 64, Cout just above 32
          Shape{2, 40, 8, 20, 20, 3, 4},   // K = 480: a partial last chunk
          Shape{2, 8, 136, 8, 12, 1, 1},   // vector A, 2 N tiles
          Shape{1, 24, 200, 6, 6, 3, 3},   // one M tile, partial
          Shape{5, 7, 9, 13, 11, 1, 1},    // K = 7, odd everything
      },
      CnnShapes());
}

class ImplicitGemmWgmmaTest : public ::testing::TestWithParam<Case> {};

TEST_P(ImplicitGemmWgmmaTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam().shape, kAlgorithm, GetParam().max_positions);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ImplicitGemmWgmmaTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.shape.ToString(); });

// The bias, which the kernels add themselves (the epilogue's stores; a stream-K tail's tiles start
// from it): every shape above with a bias, so that both epilogues (the edge shapes with 8 or more
// k-tiles take a tail) and every gather path add it.
TEST(ImplicitGemmWgmmaGpuTest, BiasMatchesFp64Reference) {
  for (const Case& c : Cases()) {
    Shape biased = c.shape;
    biased.has_bias = true;
    ExpectMatchesReference(biased, kAlgorithm, std::min<int64_t>(c.max_positions, 1 << 14));
  }
}

// Padding, stride and dilation (the geometry gather), ResNet-50's forms at reduced batch among
// them, at every output.
Shape Geometry(Shape s, int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t sh, int64_t sw,
               int64_t dh, int64_t dw) {
  s.pad_top = pt, s.pad_bottom = pb, s.pad_left = pl, s.pad_right = pr;
  s.stride_h = sh, s.stride_w = sw, s.dilation_h = dh, s.dilation_w = dw;
  return s;
}

// dgrad by the fold (transposed_dgrad.h's DgradAsFold: one 1x1 forward into the columns, then
// the gather): the three stems at reduced batch, and a stride with a dilation (no phases), at
// every dx, and on every input class in dy and w.
TEST(ImplicitGemmWgmmaGpuTest, DgradByTheFoldMatchesFp64Reference) {
  const Algorithm* alg = Registry::Global().Find(kAlgorithm);
  ASSERT_NE(alg, nullptr);
  int seed = 41;
  for (Shape s : {
           Geometry(Shape{2, 3, 64, 58, 58, 7, 7}, 3, 3, 3, 3, 2, 2, 1, 1),
           Geometry(Shape{3, 3, 32, 46, 45, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1),
           Geometry(Shape{2, 3, 96, 36, 32, 4, 4}, 0, 0, 0, 0, 4, 4, 1, 1),
           Geometry(Shape{2, 4, 16, 21, 19, 3, 3}, 2, 1, 2, 0, 2, 3, 2, 2),
       }) {
    s.op = Op::kDgrad;
    SCOPED_TRACE(s.ToString());
    absl::StatusOr<Proposal> p = alg->Propose(s, DeviceInfo::ModelDevice());
    ASSERT_TRUE(p.ok()) << p.status();
    const TransposedDgradProposal* t = ConfigOf<TransposedDgradProposal>(*p);
    ASSERT_TRUE(t != nullptr && t->phases.size() == 1 && t->phases[0].fold)
        << "the model no longer folds this dgrad";
    ExpectMatchesReference(s, kAlgorithm, /*max_positions=*/1 << 18);
    ExpectEveryClassWithinBar(s, kAlgorithm, seed++);
  }
}

TEST(ImplicitGemmWgmmaGpuTest, GeometryMatchesFp64Reference) {
  for (const Shape& s : {
           Geometry(Shape{2, 8, 24, 14, 14, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1),
           Geometry(Shape{2, 8, 40, 15, 13, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1),
           Geometry(Shape{2, 3, 64, 58, 58, 7, 7}, 3, 3, 3, 3, 2, 2, 1, 1),
           Geometry(Shape{2, 64, 130, 28, 28, 1, 1}, 0, 0, 0, 0, 2, 2, 1, 1),
           Geometry(Shape{2, 3, 96, 32, 32, 4, 4}, 0, 0, 0, 0, 4, 4, 1, 1),
           Geometry(Shape{1, 5, 9, 11, 12, 2, 2}, 0, 0, 0, 0, 3, 3, 1, 1),
           Geometry(Shape{2, 4, 12, 17, 19, 3, 3}, 2, 0, 5, 1, 1, 1, 1, 1),
           Geometry(Shape{1, 6, 10, 20, 18, 3, 2}, 2, 2, 1, 3, 1, 2, 2, 3),
           Geometry(Shape{4, 64, 64, 56, 56, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1),
           Geometry(Shape{2, 128, 128, 28, 28, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1),
           Geometry(Shape{1, 3, 5, 12, 12, 1, 1}, 0, 0, 0, 0, 1, 1, 2, 2),
       }) {
    ExpectMatchesReference(s, kAlgorithm, /*max_positions=*/1 << 18);
    Shape biased = s;
    biased.has_bias = true;
    ExpectMatchesReference(biased, kAlgorithm, /*max_positions=*/1 << 14);
  }
}

// Groups as a grouped GEMM (each N tile within one group): ResNeXt's 32 groups of 4-32 channels,
// two groups of 64 (a wide group), odd channels per group (3 in, 5 out), a group wider than the
// 128-wide tile (130 per group), depthwise with a multiplier, stride, asymmetric padding, 1x1
// without padding (grouped shapes all take the geometry gather), bias; at every output up to 2^18; and every input class
// on two of them.
TEST(ImplicitGemmWgmmaGpuTest, GroupsMatchFp64Reference) {
  Shape asym = GroupedShape(2, 12, 18, 3, 17, 16, 3, 4, 0, 1, 1, true);
  asym.pad_top = 2, asym.pad_bottom = 0, asym.pad_left = 1, asym.pad_right = 3, asym.stride_w = 2;
  const std::vector<Shape> shapes = {
      GroupedShape(2, 256, 256, 32, 14, 14, 3, 3, 1, 1, 1, false),   // 8 per group
      GroupedShape(2, 1024, 1024, 32, 7, 7, 3, 3, 1, 1, 1, true),    // 32 per group
      GroupedShape(1, 256, 256, 32, 28, 28, 3, 3, 1, 2, 1, false),   // stride 2
      GroupedShape(2, 128, 128, 2, 28, 28, 3, 3, 1, 1, 1, true),     // 64 per group
      GroupedShape(2, 6, 10, 2, 21, 18, 3, 3, 1, 1, 1, true),        // 3 in, 5 out
      GroupedShape(1, 8, 260, 2, 9, 10, 3, 2, 0, 1, 1, false),       // 130 out per group
      GroupedShape(2, 64, 128, 4, 16, 12, 1, 1, 0, 1, 1, true),      // 1x1, no padding
      DepthwiseShape(2, 12, 3, 15, 14, 3, 3, 1, 1, 1, true),         // depthwise, multiplier 3
      asym,
  };
  for (const Shape& s : shapes) {
    ASSERT_TRUE(ValidateShape(s).ok()) << s.ToString();
    ExpectMatchesReference(s, kAlgorithm, /*max_positions=*/1 << 18);
  }
  for (const Shape& s : {shapes[1], shapes[4]}) ExpectEveryClassWithinBar(s, kAlgorithm, 78);
}

// The filter split inside the main kernel (one launch, the lab's forced
// implicit_gemm_wgmma_split_in_kernel) on every shape whose schedule allows it (whole tiles, no
// groups), with and without a bias: within the bar, and bit for bit the split kernel's result
// (implicit_gemm_wgmma_split_kernel: the same split values, the same wgmma order). Shapes it
// refuses are counted: most of the cases must run.
TEST(ImplicitGemmWgmmaGpuTest, InKernelSplitMatchesTheSplitKernel) {
  ASSERT_TRUE(kLabRegistered) << "the lab's forced variants are not registered";
  std::vector<Shape> shapes;
  for (const Case& c : Cases()) shapes.push_back(c.shape);
  for (const Shape& s : GeometryShapes()) shapes.push_back(s);
  int ran = 0;
  for (Shape s : shapes) {
    for (bool bias : {false, true}) {
      s.has_bias = bias;
      absl::StatusOr<Plan> plan = Plan::Create(s, kInKernelSplit);
      if (absl::IsUnimplemented(plan.status())) continue;
      ASSERT_TRUE(plan.ok()) << s.ToString() << ": " << plan.status();
      // The paths really differ: the in-kernel split needs no workspace, the split kernel does.
      EXPECT_EQ(plan->workspace_bytes(), 0u) << s.ToString();
      absl::StatusOr<Plan> split_plan = Plan::Create(s, kSplitKernel);
      ASSERT_TRUE(split_plan.ok()) << s.ToString() << ": " << split_plan.status();
      EXPECT_GT(split_plan->workspace_bytes(), 0u) << s.ToString();
      ++ran;
      ExpectMatchesReference(s, kInKernelSplit, /*max_positions=*/1 << 14);
      absl::StatusOr<DeviceProblem> p = DeviceProblem::Create(s, 17, Distribution::kNormal);
      ASSERT_TRUE(p.ok()) << p.status();
      absl::StatusOr<std::vector<float>> in_kernel = RunOnce(*p, kInKernelSplit, {});
      ASSERT_TRUE(in_kernel.ok()) << in_kernel.status();
      absl::StatusOr<std::vector<float>> split_kernel = RunOnce(*p, kSplitKernel, {});
      ASSERT_TRUE(split_kernel.ok()) << split_kernel.status();
      ASSERT_EQ(in_kernel->size(), split_kernel->size());
      EXPECT_EQ(std::memcmp(in_kernel->data(), split_kernel->data(),
                            in_kernel->size() * sizeof(float)),
                0)
          << s.ToString() << ": the two splits differ";
    }
  }
  EXPECT_GE(ran, static_cast<int>(shapes.size()));  // at least half of the (shape, bias) pairs
  std::printf("in-kernel split: %d of %zu (shape, bias) cases ran\n", ran, 2 * shapes.size());
}

// The rule takes the in-kernel split (no workspace) on a tiny problem (2 M tiles, BN = 32) and
// the split kernel on one with 18 M tiles, where the in-kernel split measured slower (PERF.md
// round 91).
TEST(ImplicitGemmWgmmaGpuTest, RuleTakesTheInKernelSplitOnTinyProblems) {
  absl::StatusOr<Plan> tiny = Plan::Create(Shape{1, 8, 8, 16, 16, 3, 3}, kAlgorithm);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->workspace_bytes(), 0u);
  Shape padded{4, 16, 16, 24, 24, 3, 3};
  padded.pad_top = padded.pad_bottom = padded.pad_left = padded.pad_right = 1;
  absl::StatusOr<Plan> larger = Plan::Create(padded, kAlgorithm);
  ASSERT_TRUE(larger.ok()) << larger.status();
  EXPECT_GT(larger->workspace_bytes(), 0u);
}

// The schedule this GPU gives a shape, for the messages: "tail: C CTAs over T tiles" or "whole
// tiles".
std::string ScheduleOf(const Shape& s) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return "schedule unknown";
  }
  using namespace implicit_gemm_wgmma_internal;  // NOLINT: the kernel's own schedule
  const int bn = ChooseBN(s);
  const Params p = MakeParams(s, bn, sms * CtasPerSm(bn));
  if (p.tail_ctas == 0) return "BN " + std::to_string(bn) + ", whole tiles";
  return "BN " + std::to_string(bn) + ", stream-K tail: " + std::to_string(p.tail_ctas) +
         " CTAs over " + std::to_string(p.tiles - p.dp_tiles) + " tiles of " +
         std::to_string(p.k_tiles) + " k-tiles";
}

// Calls of one plan on the same inputs give the same bits, however the workspace and y were
// left: before each call the workspace is zeros, NaN bits (0xff), huge finite values (0x7f),
// -0 / tiny (0x80) or what the previous call left, at several offsets from an aligned address
// (the runner aligns inside it), and y is poisoned with a different pattern; the last calls are
// enqueued back to back on the stream with nothing in between (a call that overlapped the one
// before, or read what it left, would show there), and one runs on a second stream (the plan's
// graph for that stream). Each output is compared with the first call's, element for element.
void ExpectRepeatable(const Shape& s, const std::string& algorithm) {
  SCOPED_TRACE(s.ToString() + " (" + ScheduleOf(s) + ")");
  absl::StatusOr<Plan> plan = Plan::Create(s, algorithm);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<DeviceProblem> problem = DeviceProblem::Create(s, 23, Distribution::kNormal);
  ASSERT_TRUE(problem.ok()) << problem.status();
  const size_t ws = plan->workspace_bytes();
  const size_t n = static_cast<size_t>(s.output_elements());
  constexpr int kCalls = 9;
  constexpr int kBackToBack = 5;  // calls kBackToBack.. are enqueued without a sync between
  const int fill[kCalls] = {0x00, 0xff, 0x7f, -1, 0x80, 0xff, -1, 0x3c, 0x00};  // -1: as left
  const int poison[kCalls] = {0xff, 0x00, 0x7f, 0xff, 0x80, 0x01, 0xff, 0x00, 0x7f};
  const size_t offset[kCalls] = {0, 0, 4, 4, 128, 36, 36, 0, 252};
  absl::StatusOr<DeviceBuffer> work = DeviceBuffer::Allocate(ws + 256);
  ASSERT_TRUE(work.ok()) << work.status();
  std::vector<DeviceBuffer> ys;
  for (int i = 0; i < kCalls; ++i) {
    absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Allocate(n * sizeof(float));
    ASSERT_TRUE(y.ok()) << y.status();
    ys.push_back(std::move(*y));
  }
  cudaStream_t streams[2];
  ASSERT_EQ(cudaStreamCreateWithFlags(&streams[0], cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&streams[1], cudaStreamNonBlocking), cudaSuccess);
  for (int i = 0; i < kCalls; ++i) {
    cudaStream_t stream = streams[i == kCalls - 1 ? 1 : 0];
    if (i == kCalls - 1) ASSERT_EQ(cudaStreamSynchronize(streams[0]), cudaSuccess);
    unsigned char* w = ws > 0 ? work->as<unsigned char>() + offset[i] : nullptr;
    if (fill[i] >= 0 && ws > 0) ASSERT_EQ(cudaMemsetAsync(w, fill[i], ws, stream), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(ys[i].p, poison[i], n * sizeof(float), stream), cudaSuccess);
    absl::Status st = plan->Run(problem->x(), problem->w(), problem->bias(), ys[i].as<float>(),
                                w, ws, stream);
    ASSERT_TRUE(st.ok()) << "call " << i << ": " << st;
    if (i < kBackToBack) ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  for (cudaStream_t stream : streams) {
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaStreamDestroy(stream);
  }
  std::vector<std::vector<float>> out(kCalls, std::vector<float>(n));
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(cudaMemcpy(out[i].data(), ys[i].p, n * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  for (int i = 1; i < kCalls; ++i) {
    int64_t differ = 0, first = -1;
    double worst = 0;
    for (size_t e = 0; e < n; ++e) {
      if (std::memcmp(&out[i][e], &out[0][e], sizeof(float)) != 0) {
        if (differ++ == 0) first = static_cast<int64_t>(e);
        worst = std::max(worst, static_cast<double>(std::fabs(out[i][e] - out[0][e])));
      }
    }
    EXPECT_EQ(differ, 0) << "call " << i << " differs from call 0 at " << differ << " of " << n
                         << " outputs (first " << first << ", by up to " << worst << ")";
  }
}

// The shape measured non-deterministic on an H100 (x (16, 32, 32, 32), w (64, 32, 3, 3), stride
// 2, padding 1: a stream-K tail of three pieces a tile there), with a bias; tails at each tile
// width; odd sizes with asymmetric padding and stride, dilation, groups, a 1x1 (the 16-byte
// gather), a tiny problem (the in-kernel split, no workspace); and the edge and KernelBot test
// shapes. Each shape's schedule on this GPU is in its messages.
TEST(ImplicitGemmWgmmaGpuTest, RepeatedCallsGiveTheSameBits) {
  std::vector<Shape> shapes = {
      WithGeometry(Shape{16, 32, 64, 32, 32, 3, 3}, 1, 1, 1, 1, 2, 2),
      WithGeometry(Shape{16, 32, 64, 32, 32, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1, 1, /*bias=*/true),
      WithGeometry(Shape{32, 128, 128, 28, 28, 3, 3}, 1, 1, 1, 1, 1, 1),  // BN 128, tail
      WithGeometry(Shape{8, 64, 32, 28, 28, 3, 3}, 1, 1, 1, 1, 1, 1),     // BN 32, tail
      WithGeometry(Shape{3, 7, 45, 29, 31, 3, 5}, 1, 2, 0, 1, 2, 1),
      WithGeometry(Shape{4, 64, 64, 33, 33, 3, 3}, 2, 2, 2, 2, 1, 1, 2, 2),
      GroupedShape(2, 256, 256, 32, 14, 14, 3, 3, 1, 1, 1, true),
      GroupedShape(4, 128, 128, 2, 28, 28, 3, 3, 1, 2, 1, false),
      Shape{16, 64, 64, 32, 32, 1, 1},
      WithGeometry(Shape{1, 8, 8, 16, 16, 3, 3}, 1, 1, 1, 1, 1, 1),
  };
  for (const std::vector<Shape>& list : {EdgeShapes(), KernelBotTestShapes()}) {
    shapes.insert(shapes.end(), list.begin(), list.end());
  }
  int tails = 0;
  for (const Shape& s : shapes) {
    ASSERT_TRUE(ValidateShape(s).ok()) << s.ToString();
    tails += ScheduleOf(s).find("tail") != std::string::npos;
    ExpectRepeatable(s, kAlgorithm);
  }
  EXPECT_GE(tails, 3) << "too few shapes take a stream-K tail on this GPU to test it";
}

// Infinities in x: an output whose window holds them is the infinity fp32 summation gives (NaN
// where products of both signs meet, as the fp64 reference says), every other output finite
// and within the bar; for both implicit GEMMs (auto's picks for 1x1 layers, and the ones whose
// 3xTF32 split once made every such output NaN) and auto. The measured case: x (2, 64, 32, 32),
// w (64, 64, 1, 1), one infinity (64 outputs of 131072); here six, in four pixels; and a padded,
// strided 3x3 layer.
TEST(ImplicitGemmWgmmaGpuTest, InfinityInXGivesTheInfinity) {
  struct InfCase {
    Shape shape;
    std::vector<std::pair<int64_t, float>> x_set;
  };
  const int64_t plane = 32 * 32;
  std::vector<InfCase> cases = {
      {Shape{2, 64, 64, 32, 32, 1, 1},
       {{5 * plane + 9, INFINITY},
        {64 * plane + 3 * plane + 20, -INFINITY},
        {7 * plane + 300, INFINITY},
        {40 * plane + 300, INFINITY},
        {11 * plane + 777, INFINITY},
        {12 * plane + 777, -INFINITY}}},
      {WithGeometry(Shape{2, 16, 40, 31, 29, 3, 3}, 1, 1, 1, 1, 2, 2),
       {{2 * 31 * 29 + 7 * 29 + 6, INFINITY}, {16 * 31 * 29, -INFINITY}}},
  };
  for (const InfCase& c : cases) {
    std::vector<float> x = RandomTensor(5, kInputTensor, c.shape.input_elements());
    for (const auto& [at, v] : c.x_set) x.at(static_cast<size_t>(at)) = v;
    std::vector<float> w = RandomTensor(5, kFilterTensor, c.shape.filter_elements());
    absl::StatusOr<DeviceProblem> problem = DeviceProblem::FromHost(c.shape, x, w);
    ASSERT_TRUE(problem.ok()) << problem.status();
    absl::StatusOr<std::vector<double>> y64 = GpuReference(*problem);
    ASSERT_TRUE(y64.ok()) << y64.status();
    int64_t infinite = 0;
    for (double v : *y64) infinite += std::isinf(v);
    ASSERT_GT(infinite, 0) << "no infinite reference output: the case tests nothing";
    for (const char* algorithm : {kAlgorithm, "implicit_gemm_3xtf32", "auto"}) {
      SCOPED_TRACE(c.shape.ToString() + " " + algorithm);
      if (!Plan::Create(c.shape, algorithm).ok()) continue;  // 3xtf32: the basic form only
      absl::StatusOr<std::vector<float>> y = RunOnce(*problem, algorithm, {});
      ASSERT_TRUE(y.ok()) << y.status();
      int64_t wrong = 0, first = -1;
      std::vector<float> finite_y;
      std::vector<double> finite_ref;
      for (size_t i = 0; i < y->size(); ++i) {
        const double r = (*y64)[i];
        const float v = (*y)[i];
        if (std::isfinite(r)) {
          finite_y.push_back(v), finite_ref.push_back(r);
          continue;
        }
        const bool same = std::isnan(r) ? std::isnan(v) : static_cast<double>(v) == r;
        if (!same && wrong++ == 0) first = static_cast<int64_t>(i);
      }
      EXPECT_EQ(wrong, 0) << wrong << " non-finite outputs differ from fp32 summation's (first "
                          << first << ": " << (*y)[first] << ", reference " << (*y64)[first]
                          << ")";
      const Comparison cmp = Compare(finite_y, finite_ref, {}, 1e-3, 1e-3);
      EXPECT_TRUE(cmp.ok()) << cmp.ToString();
    }
  }
}

TEST(ImplicitGemmWgmmaGpuTest, InputsChangeBetweenCalls) {
  absl::Status st = CheckInputsChangeBetweenCalls(kAlgorithm);
  EXPECT_TRUE(st.ok()) << st;
}

// Not a pass/fail check: effective TFLOP/s (2*N*K*M / time, the filter split included) on the
// cnn shapes, the mean of 20 calls after 3 warm-up calls.
TEST(ImplicitGemmWgmmaGpuTest, Throughput) {
  for (const Shape& s : CnnShapes()) {
    absl::StatusOr<Plan> plan = Plan::Create(s, kAlgorithm);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<DeviceProblem> p = DeviceProblem::Create(s, 1);
    ASSERT_TRUE(p.ok()) << p.status();
    DeviceBuffer ws;
    if (plan->workspace_bytes() > 0) {
      ASSERT_EQ(cudaMalloc(&ws.p, plan->workspace_bytes()), cudaSuccess);
    }
    cudaEvent_t start, stop;
    ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
    constexpr int kWarm = 3, kIters = 20;
    for (int i = 0; i < kWarm + kIters; ++i) {
      if (i == kWarm) cudaEventRecord(start, nullptr);
      ASSERT_TRUE(plan->Run(p->x(), p->w(), p->y(), ws.p, plan->workspace_bytes(), nullptr).ok());
    }
    cudaEventRecord(stop, nullptr);
    ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    const double seconds = ms / 1e3 / kIters;
    std::printf("%-20s %-36s %9.1f us %7.1f TFLOP/s effective, workspace %.1f MiB\n",
                kAlgorithm, s.ToString().c_str(), seconds * 1e6, s.flops() / seconds / 1e12,
                plan->workspace_bytes() / 1048576.0);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
}

}  // namespace
}  // namespace conv2d
