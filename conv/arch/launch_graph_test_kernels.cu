#include "conv/arch/launch_graph_test_kernels.h"

#include "conv/arch/pdl.cuh"

namespace conv2d {
namespace {

__global__ void Fill(float scale, float* a, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    a[i] = static_cast<float>(i) * scale;
  }
  PdlLaunchDependents();  // the next kernel may start; it waits (PdlWait) before reading a
}

__global__ void AddOne(const float* a, float* b, int n) {
  PdlWait();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    b[i] = a[i] + 1.0f;
  }
  PdlLaunchDependents();
}

__global__ void Double(const float* b, float* c, int n) {
  PdlWait();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    c[i] = 2.0f * b[i];
  }
}

}  // namespace

cudaError_t EnqueueChain(float scale, float* a, float* b, float* c, int n, cudaStream_t stream) {
  const dim3 blocks(64), threads(256);
  cudaError_t err = LaunchPdl(/*pdl=*/false, Fill, blocks, threads, 0, stream, scale, a, n);
  if (err == cudaSuccess) err = LaunchPdl(/*pdl=*/true, AddOne, blocks, threads, 0, stream, a, b, n);
  if (err == cudaSuccess) err = LaunchPdl(/*pdl=*/true, Double, blocks, threads, 0, stream, b, c, n);
  return err;
}

}  // namespace conv2d
