// Host microseconds per enqueue of an empty kernel by each launch path: <<<>>>,
// cudaLaunchKernelEx with and without PDL, the driver's cuLaunchKernel(Ex), four launches in a
// row (the FFT's), and a four-node graph: cudaGraphLaunch alone and after setting each node's
// arguments (runtime and driver). Each measured as 200 calls behind a kernel that spins 4e8
// cycles (~0.2 s), median of 7.
// What chose conv/arch/launch_graph.h's design (docs/PERF.md, round 93). Needs a GPU.
//   launch_cost
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>

#include "conv/arch/launch_graph.h"

struct Params { char bytes[224]; };
__global__ void Empty(Params p, const float* x, float* y, unsigned long long e) {
  if (threadIdx.x == 0 && p.bytes[0] == 123 && e == 7) y[0] = x[0];
}
__global__ void EmptyPdl(Params p, const float* x, float* y, unsigned long long e) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  if (threadIdx.x == 0 && p.bytes[0] == 123 && e == 7) y[0] = x[0];
}
__global__ void Spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// f's host time (us), timed behind a spinning kernel on `stream` (the stream f enqueues on).
template <typename F> double Us(F f, int calls = 200, cudaStream_t stream = 0, int reps = 7) {
  for (int i = 0; i < 50; ++i) f();
  cudaDeviceSynchronize();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    Spin<<<1, 1, 0, stream>>>(400000000LL);  // ~0.2 s at the SM clock
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  cudaFree(0);
  float *x, *y; cudaMalloc(&x, 1024); cudaMalloc(&y, 1024);
  Params p{}; unsigned long long e = 1;
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStream_t s0 = 0;
  auto pdl_config = [&](cudaLaunchConfig_t& c, cudaLaunchAttribute& a, int n, cudaStream_t st) {
    c = conv2d::LaunchConfig(dim3(132), dim3(256), 0, st, /*pdl=*/n == 1, &a);
  };
  printf("<<<>>>                 %.2f us\n", Us([&] { Empty<<<132, 256, 0, s0>>>(p, x, y, e); }));
  printf("cudaLaunchKernelEx     %.2f us\n", Us([&] {
    cudaLaunchConfig_t c; cudaLaunchAttribute a; pdl_config(c, a, 0, s0);
    cudaLaunchKernelEx(&c, Empty, p, (const float*)x, y, e); }));
  printf("cudaLaunchKernelEx+PDL %.2f us\n", Us([&] {
    cudaLaunchConfig_t c; cudaLaunchAttribute a; pdl_config(c, a, 1, s0);
    cudaLaunchKernelEx(&c, EmptyPdl, p, (const float*)x, y, e); }));
  // Driver entry points.
  PFN_cuLaunchKernel_v4000 cuLaunch; PFN_cuLaunchKernelEx_v11060 cuLaunchEx;
  cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPoint("cuLaunchKernel", (void**)&cuLaunch, cudaEnableDefault, &q);
  cudaGetDriverEntryPoint("cuLaunchKernelEx", (void**)&cuLaunchEx, cudaEnableDefault, &q);
  cudaFunction_t fe, fp; cudaGetFuncBySymbol(&fe, (const void*)Empty); cudaGetFuncBySymbol(&fp, (const void*)EmptyPdl);
  printf("cuLaunchKernel         %.2f us\n", Us([&] {
    const float* xc = x; void* args[] = {&p, &xc, &y, &e};
    cuLaunch((CUfunction)fe, 132, 1, 1, 256, 1, 1, 0, (CUstream)s0, args, nullptr); }));
  printf("cuLaunchKernelEx+PDL   %.2f us\n", Us([&] {
    const float* xc = x; void* args[] = {&p, &xc, &y, &e};
    CUlaunchAttribute a; a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; a.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig c{}; c.gridDimX = 132; c.gridDimY = 1; c.gridDimZ = 1; c.blockDimX = 256; c.blockDimY = 1; c.blockDimZ = 1;
    c.hStream = (CUstream)s0; c.attrs = &a; c.numAttrs = 1;
    cuLaunchEx(&c, (CUfunction)fp, args, nullptr); }));
  printf("4 launches (1 plain, 3 PDL) %.2f us\n", Us([&] {
    Empty<<<132, 256, 0, s0>>>(p, x, y, e);
    for (int i = 0; i < 3; ++i) { cudaLaunchConfig_t c; cudaLaunchAttribute a; pdl_config(c, a, 1, s0);
      cudaLaunchKernelEx(&c, EmptyPdl, p, (const float*)x, y, e); } }));
  // Graph of 4 kernels captured with PDL.
  cudaGraph_t g; cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  Empty<<<132, 256, 0, s>>>(p, x, y, e);
  for (int i = 0; i < 3; ++i) { cudaLaunchConfig_t c; cudaLaunchAttribute a; pdl_config(c, a, 1, s);
    cudaLaunchKernelEx(&c, EmptyPdl, p, (const float*)x, y, e); }
  cudaError_t err = cudaStreamEndCapture(s, &g);
  printf("capture: %s\n", cudaGetErrorString(err));
  err = cudaGraphInstantiate(&ge, g, 0);
  printf("instantiate: %s\n", cudaGetErrorString(err));
  size_t n = 0; cudaGraphGetNodes(g, nullptr, &n); std::vector<cudaGraphNode_t> nodes(n); cudaGraphGetNodes(g, nodes.data(), &n);
  size_t ne = 0; cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &ne);
  printf("graph: %zu nodes, %zu edges\n", n, ne);
  // Timed on s, the graph's stream.
  auto UsS = [&](auto f) { return Us(f, 200, s); };
  printf("cudaGraphLaunch (4 nodes)  %.2f us\n", UsS([&] { cudaGraphLaunch(ge, s); }));
  std::vector<cudaKernelNodeParams> kp(n);
  for (size_t i = 0; i < n; ++i) cudaGraphKernelNodeGetParams(nodes[i], &kp[i]);
  unsigned long long ctr = 1;
  printf("4 x cudaGraphExecKernelNodeSetParams + launch  %.2f us\n", UsS([&] {
    ++ctr; const float* xc = x; void* args[] = {&p, &xc, &y, &ctr};
    for (size_t i = 0; i < n; ++i) { cudaKernelNodeParams k = kp[i]; k.kernelParams = args;
      cudaGraphExecKernelNodeSetParams(ge, nodes[i], &k); }
    cudaGraphLaunch(ge, s); }));
  printf("  last error: %s\n", cudaGetErrorString(cudaGetLastError()));
  printf("1 x cudaGraphExecKernelNodeSetParams  %.2f us\n", UsS([&] {
    ++ctr; const float* xc = x; void* args[] = {&p, &xc, &y, &ctr};
    cudaKernelNodeParams k = kp[0]; k.kernelParams = args; cudaGraphExecKernelNodeSetParams(ge, nodes[0], &k); }));
  PFN_cuGraphExecKernelNodeSetParams_v12000 cuSet;
  cudaGetDriverEntryPoint("cuGraphExecKernelNodeSetParams", (void**)&cuSet, cudaEnableDefault, &q);
  printf("4 x cuGraphExecKernelNodeSetParams + launch  %.2f us\n", UsS([&] {
    ++ctr; const float* xc = x; void* args[] = {&p, &xc, &y, &ctr};
    for (size_t i = 0; i < n; ++i) { CUDA_KERNEL_NODE_PARAMS k{}; k.func = (CUfunction)kp[i].func; 
      cudaGetFuncBySymbol((cudaFunction_t*)&k.func, kp[i].func);
      k.gridDimX = kp[i].gridDim.x; k.gridDimY = 1; k.gridDimZ = 1; k.blockDimX = 256; k.blockDimY = 1; k.blockDimZ = 1;
      k.kernelParams = args; cuSet((CUgraphExec)ge, (CUgraphNode)nodes[i], &k); }
    cudaGraphLaunch(ge, s); }));
  printf("  last error: %s\n", cudaGetErrorString(cudaGetLastError()));
  // Small queries.
  printf("cudaStreamIsCapturing  %.3f us\n", Us([&] { cudaStreamCaptureStatus st; cudaStreamIsCapturing(s0, &st); }, 2000));
  printf("cudaGetDevice          %.3f us\n", Us([&] { int d; cudaGetDevice(&d); }, 2000));
  printf("cudaPointerGetAttributes %.3f us\n", Us([&] { cudaPointerAttributes at; cudaPointerGetAttributes(&at, x); }, 2000));
  printf("cudaGetLastError       %.3f us\n", Us([&] { cudaGetLastError(); }, 2000));
  cudaDeviceSynchronize();
  printf("final: %s\n", cudaGetErrorString(cudaGetLastError()));
}
