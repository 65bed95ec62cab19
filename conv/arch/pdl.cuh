// Programmatic dependent launch (PDL, sm_90): a kernel launched by LaunchPdl may start while the
// kernel before it in the stream is still running, as soon as every CTA of that kernel has run
// PdlLaunchDependents (or exited). It must run PdlWait, which returns once that kernel has
// completed and its memory is visible, before it touches anything that kernel reads or writes,
// and before it exits (so that completion stays transitive along a chain of such kernels).
// What it buys: the next kernel's launch and the start of its CTAs overlap the previous kernel's
// last wave instead of following it (PERF.md round 31).
//
// Used only between kernels of one call of a variant, which know each other's buffers. The last
// kernel of a call never runs PdlLaunchDependents, so nothing the caller enqueues after the call
// can overlap it. Device and host code; include from .cu files only.
#ifndef CONV2D_CONV_PDL_CUH_
#define CONV2D_CONV_PDL_CUH_

#include <cuda_runtime.h>

#include <utility>

#include "conv/arch/launch_graph.h"
#include "conv/arch/per_device.h"

namespace conv2d {

// No-ops where the kernel was launched without the attribute, and in code for older GPUs (which
// LaunchPdl never launches with it).
__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void PdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// True where the current device has compute capability 9.0, the only GPUs that run the sm_90a
// code (wgmma, and the PdlWait instructions); others run the PTX built for compute_80. Read once
// per device (a process may drive GPUs of different kinds).
inline bool RunsSm90aCode() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  static PerDevice<bool>* supported = new PerDevice<bool>;
  return supported->Get(device, [device] {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      return false;
    }
    return major == 9 && minor == 0;
  });
}

// kernel<<<blocks, threads, smem, stream>>>(args...), allowed to overlap the kernel before it
// when `pdl` is set and the device supports it; appended to the thread's LaunchRecording instead
// where one is current (launch_graph.h: the plan then enqueues the call's kernels as one graph).
template <typename... Params, typename... Args>
cudaError_t LaunchPdl(bool pdl, void (*kernel)(Params...), dim3 blocks, dim3 threads, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  if (LaunchRecording* recording = LaunchRecording::Current()) {
    return recording->Add(pdl && RunsSm90aCode(), kernel, blocks, threads, smem, stream,
                          std::forward<Args>(args)...);
  }
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config =
      LaunchConfig(blocks, threads, smem, stream, pdl && RunsSm90aCode(), &attribute);
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace conv2d

#endif  // CONV2D_CONV_PDL_CUH_
