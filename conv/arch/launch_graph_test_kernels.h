// A three-kernel chain for launch_graph_test: a[i] = i * scale, then (PDL) b[i] = a[i] + 1, then
// (PDL) c[i] = 2 * b[i], each through LaunchPdl: recorded where a LaunchRecording is current,
// launched plainly otherwise.
#ifndef CONV2D_CONV_ARCH_LAUNCH_GRAPH_TEST_KERNELS_H_
#define CONV2D_CONV_ARCH_LAUNCH_GRAPH_TEST_KERNELS_H_

#include <cuda_runtime_api.h>

namespace conv2d {

cudaError_t EnqueueChain(float scale, float* a, float* b, float* c, int n, cudaStream_t stream);

}  // namespace conv2d

#endif  // CONV2D_CONV_ARCH_LAUNCH_GRAPH_TEST_KERNELS_H_
