// Round 75: the H200's write rate. A kernel that only writes N bytes (float4 stores, grid-stride),
// and a copy, timed with events after a 256 MB flush write (KernelBot's protocol) and without one.
// Built alone: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a write_rate.cu -o write_rate
#include <cstdio>
#include <cuda_runtime.h>
__global__ void Write(float4* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = make_float4(1, 2, 3, 4);
}
__global__ void Copy(float4* d, const float4* s, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    d[i] = s[i];
}
int main() {
  const size_t flush = 256u << 20;
  void *f, *a, *b;
  cudaMalloc(&f, flush);
  cudaMalloc(&a, 600u << 20);
  cudaMalloc(&b, 600u << 20);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (size_t mb : {18, 68, 108, 277}) {
    const size_t bytes = mb << 20, n = bytes / 16;
    for (int flushed = 0; flushed < 2; ++flushed) {
      for (int kind = 0; kind < 2; ++kind) {
        float total = 0;
        for (int it = -2; it < 20; ++it) {
          if (flushed) cudaMemsetAsync(f, 0, flush);
          cudaEventRecord(e0);
          if (kind == 0) Write<<<132 * 8, 256>>>((float4*)a, n);
          else Copy<<<132 * 8, 256>>>((float4*)a, (const float4*)b, n);
          cudaEventRecord(e1);
          cudaEventSynchronize(e1);
          float ms; cudaEventElapsedTime(&ms, e0, e1);
          if (it >= 0) total += ms;
        }
        const double ms = total / 20;
        std::printf("%s %4zu MB %s: %.4f ms, %.2f TB/s written%s\n", kind ? "copy " : "write", mb,
                    flushed ? "after flush" : "no flush   ", ms, bytes / ms / 1e9,
                    kind ? " (and as much read)" : "");
      }
    }
  }
  return 0;
}
