// CONV2D_HOST_DEVICE marks the plain C++ functions that both a CUDA kernel and its CPU test run
// (the index algebra, the transforms): __host__ __device__ under nvcc, nothing elsewhere.
#ifndef CONV2D_CONV_HOST_DEVICE_H_
#define CONV2D_CONV_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define CONV2D_HOST_DEVICE __host__ __device__
#else
#define CONV2D_HOST_DEVICE
#endif

#endif  // CONV2D_CONV_HOST_DEVICE_H_
