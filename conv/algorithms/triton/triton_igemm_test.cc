// "triton_igemm" on the GPU against the fp64 reference (edge shapes, KernelBot test and benchmark
// shapes), and the loader's driver paths: the cubin, the PTX fallback, the >48 KB shared memory
// opt-in, an empty grid. Needs a GPU of compute capability 9.0; fails loudly without one.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "conv/conv.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "conv/algorithms/triton/igemm_artifacts.h"
#include "conv/triton/triton_kernel.h"
#include "gtest/gtest.h"
#include "reference/reference.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "triton_igemm";

void Check(const Shape& shape, uint64_t seed, int64_t max_positions) {
  absl::StatusOr<Comparison> r = CheckAgainstReference(shape, kAlgorithm, seed, max_positions);
  ASSERT_TRUE(r.ok()) << shape.ToString() << ": " << r.status();
  std::printf("%-34s seed %-6llu %s\n", shape.ToString().c_str(),
              static_cast<unsigned long long>(seed), r->ToString().c_str());
  EXPECT_TRUE(r->ok()) << shape.ToString() << " " << r->ToString() << " first failure at "
                       << r->first_failure;
}

// First, so that a run on the wrong machine says why everything else fails.
TEST(TritonIgemm, RunsOnComputeCapability90) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess) << "no CUDA device: this test needs a GPU";
  ASSERT_GT(count, 0) << "no CUDA device: this test needs a GPU";
  int device = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), cudaSuccess);
  EXPECT_EQ(major * 10 + minor, 90) << "the embedded kernels are sm_90a code (H100/H200)";
}

TEST(TritonIgemm, IsRegistered) {
  bool found = false;
  for (const std::string& a : Algorithms()) found |= a == kAlgorithm;
  EXPECT_TRUE(found);
}

TEST(TritonIgemm, EdgeShapes) {
  for (const Shape& s : EdgeShapes()) {
    for (uint64_t seed : {uint64_t{3}, uint64_t{2024}}) Check(s, seed, 1 << 16);
  }
}

TEST(TritonIgemm, KernelBotTestShapes) {
  for (const Shape& s : KernelBotTestShapes()) {
    for (uint64_t seed : {uint64_t{5}, uint64_t{77}}) Check(s, seed, 1 << 16);
  }
}

// The long reductions: K = 131072 terms on the last case, where one fp32 accumulator drifts.
TEST(TritonIgemm, KernelBotBenchmarkShapesSampled) {
  Check(Shape::KernelBot(256, 32, 128, 1), 1, 4096);
  Check(Shape::KernelBot(256, 32, 128, 1), 42, 4096);
  for (const Shape& s : KernelBotBenchmarkShapes()) Check(s, 9, 4096);
}

// ---------------------------------------------------------------------------------------------
// The loader's driver paths, on the in-tree kernel through the raw API.

using triton::ArgType;
using triton::CodeChoice;
using triton::Grid;
using triton::KernelArgs;
using triton::TritonKernel;

std::vector<ArgType> Signature() {
  std::vector<ArgType> s(3, ArgType::kPointer);
  s.insert(s.end(), 10, ArgType::kI32);
  return s;
}

KernelArgs Args(const Shape& s, const float* x, const float* w, float* y) {
  const int32_t ohw = static_cast<int32_t>(s.out_h() * s.out_w());
  KernelArgs a;
  a.Pointer(x).Pointer(w).Pointer(y);
  a.I32(static_cast<int32_t>(s.batch) * ohw).I32(static_cast<int32_t>(s.out_channels));
  a.I32(static_cast<int32_t>(s.in_channels * s.kernel_h * s.kernel_w));
  a.I32(static_cast<int32_t>(s.width)).I32(static_cast<int32_t>(s.out_w())).I32(ohw);
  a.I32(static_cast<int32_t>(s.height * s.width));
  a.I32(static_cast<int32_t>(s.in_channels * s.height * s.width));
  a.I32(static_cast<int32_t>(s.kernel_w)).I32(static_cast<int32_t>(s.kernel_h * s.kernel_w));
  return a;
}

// Runs `base` loaded from `choice` on `shape` and compares with fp64 on every element.
void RunRaw(const char* base, CodeChoice choice, const char* expect_code) {
  const Shape shape{2, 5, 70, 21, 19, 4, 3};
  auto image = triton::ImageFromEmbedded(triton::IgemmConvArtifacts(), base);
  ASSERT_TRUE(image.ok()) << image.status();
  auto kernel = TritonKernel::Create(*image, Signature());
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  absl::Status s = (*kernel)->Load(-1, choice);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_STREQ((*kernel)->loaded_code(), expect_code);

  auto problem = DeviceProblem::Create(shape, 31);
  ASSERT_TRUE(problem.ok()) << problem.status();
  ASSERT_TRUE(problem->PoisonOutput().ok());
  const auto& m = (*kernel)->metadata();
  const int64_t bm = *m.Constexpr("BLOCK_M"), bn = *m.Constexpr("BLOCK_N");
  Grid grid;
  grid.x = static_cast<uint32_t>((shape.batch * shape.out_h() * shape.out_w() + bm - 1) / bm);
  grid.y = static_cast<uint32_t>((shape.out_channels + bn - 1) / bn);
  s = (*kernel)->Launch(grid, Args(shape, problem->x(), problem->w(), problem->y()), nullptr, 0,
                        nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto y = problem->ReadOutput({});
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<double> y64 =
      ReferenceConv(shape, problem->host_x().data(), problem->host_w().data());
  const Comparison c = Compare(*y, y64, {}, kAbsTol, kRelTol);
  std::printf("%s via %s: %s\n", base, expect_code, c.ToString().c_str());
  EXPECT_TRUE(c.ok()) << c.ToString();

  // An empty grid launches nothing (as Triton's launcher) and is not an error.
  ASSERT_TRUE(problem->PoisonOutput().ok());
  s = (*kernel)->Launch(Grid{0, 1, 1}, Args(shape, problem->x(), problem->w(), problem->y()),
                        nullptr, 0, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto untouched = problem->ReadOutput({0});
  ASSERT_TRUE(untouched.ok());
  EXPECT_TRUE(std::isnan((*untouched)[0]));
}

// The wide configuration needs 56 KB of dynamic shared memory: the opt-in path.
TEST(TritonLoader, CubinWithSharedMemoryOptIn) {
  RunRaw("igemm_conv_m128_n64", CodeChoice::kCubinOnly, "cubin");
}

TEST(TritonLoader, PtxFallback) {
  RunRaw("igemm_conv_m128_n64", CodeChoice::kPtxOnly, "ptx");
  RunRaw("igemm_conv_m64_n32", CodeChoice::kPtxOnly, "ptx");
}

TEST(TritonLoader, DefaultPrefersCubin) {
  RunRaw("igemm_conv_m64_n32", CodeChoice::kCubinThenPtx, "cubin");
}

TEST(TritonLoader, RunsOnAUserStream) {
  const Shape shape = Shape::KernelBot(64, 8, 32, 2);
  auto plan = Plan::Create(shape, kAlgorithm);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto problem = DeviceProblem::Create(shape, 8);
  ASSERT_TRUE(problem.ok()) << problem.status();
  ASSERT_TRUE(problem->PoisonOutput().ok());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  absl::Status s = plan->Run(problem->x(), problem->w(), problem->y(), nullptr, 0, stream);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  auto y = problem->ReadOutput({});
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<double> y64 =
      ReferenceConv(shape, problem->host_x().data(), problem->host_w().data());
  const Comparison c = Compare(*y, y64, {}, kAbsTol, kRelTol);
  EXPECT_TRUE(c.ok()) << c.ToString();
}

}  // namespace
}  // namespace conv2d
