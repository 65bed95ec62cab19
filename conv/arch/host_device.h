// The marks for plain C++ that both a CUDA kernel and its CPU test run (the index algebra, the
// transforms, the TF32 split), so that the CPU replays exercise the very code the GPU runs:
//  - CONV2D_HOST_DEVICE: __host__ __device__ under nvcc, nothing elsewhere (the compiler decides
//    about inlining; add `inline` where the function lives in a header).
//  - CONV2D_HOST_DEVICE_INLINE: __host__ __device__ __forceinline__ under nvcc, `inline`
//    elsewhere. For the small helpers inside tuned kernels' inner loops (gathers, fragment maps,
//    the split), where an outlined call would cost registers and the scheduler's freedom: the
//    kernels were measured with these forced inline, so they stay so.
//  - CONV2D_UNROLL: `#pragma unroll` in the device pass only. The host compilers would warn
//    about (or ignore) the pragma, and the CPU replays do not need it; the device code is what
//    the kernels were tuned with.
#ifndef CONV2D_CONV_HOST_DEVICE_H_
#define CONV2D_CONV_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define CONV2D_HOST_DEVICE __host__ __device__
#define CONV2D_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define CONV2D_HOST_DEVICE
#define CONV2D_HOST_DEVICE_INLINE inline
#endif

#if defined(__CUDA_ARCH__)
#define CONV2D_UNROLL _Pragma("unroll")
#else
#define CONV2D_UNROLL
#endif

#endif  // CONV2D_CONV_HOST_DEVICE_H_
