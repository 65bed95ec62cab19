// The CUDA driver API, opened at run time: libcuda.so.1 ships with the GPU driver, not with the
// toolkit, so linking it would stop binaries from starting on machines without a GPU driver.
// Internal to conv/triton.
#ifndef CONV2D_CONV_TRITON_CUDA_DRIVER_H_
#define CONV2D_CONV_TRITON_CUDA_DRIVER_H_

#include <cuda.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace conv2d {
namespace triton {

// The entry points the loader uses, as X(member, function, ABI version): the one list behind the
// table's members and the lookups that fill them (cuda_driver.cc).
// At CUDA_VERSION 13000 "cuCtxGetDevice" resolves to the two-argument cuCtxGetDevice_v2
// (device, ctx) while cuda.h declares the one-argument form: its 2.0 ABI is asked for
// explicitly (cudaTypedefs.h: PFN_cuCtxGetDevice_v2000). Seen on the H200: the wrong ABI read
// garbage.
#define CONV2D_CUDA_DRIVER_ENTRY_POINTS(X)                                     \
  X(GetErrorName, cuGetErrorName, CUDA_VERSION)                                \
  X(GetErrorString, cuGetErrorString, CUDA_VERSION)                            \
  X(DeviceGet, cuDeviceGet, CUDA_VERSION)                                      \
  X(DeviceGetAttribute, cuDeviceGetAttribute, CUDA_VERSION)                    \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, CUDA_VERSION)            \
  X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, CUDA_VERSION)          \
  X(CtxGetCurrent, cuCtxGetCurrent, CUDA_VERSION)                              \
  X(CtxGetDevice, cuCtxGetDevice, 2000)                                        \
  X(CtxPushCurrent, cuCtxPushCurrent, CUDA_VERSION)                            \
  X(CtxPopCurrent, cuCtxPopCurrent, CUDA_VERSION)                              \
  X(ModuleLoadDataEx, cuModuleLoadDataEx, CUDA_VERSION)                        \
  X(ModuleUnload, cuModuleUnload, CUDA_VERSION)                                \
  X(ModuleGetFunction, cuModuleGetFunction, CUDA_VERSION)                      \
  X(FuncGetAttribute, cuFuncGetAttribute, CUDA_VERSION)                        \
  X(FuncSetAttribute, cuFuncSetAttribute, CUDA_VERSION)                        \
  X(FuncSetCacheConfig, cuFuncSetCacheConfig, CUDA_VERSION)                    \
  X(LaunchKernelEx, cuLaunchKernelEx, CUDA_VERSION)

struct CudaDriver {
  int version = 0;  // cuDriverGetVersion, e.g. 13000
#define CONV2D_CUDA_DRIVER_MEMBER(member, function, abi) decltype(&::function) member = nullptr;
  CONV2D_CUDA_DRIVER_ENTRY_POINTS(CONV2D_CUDA_DRIVER_MEMBER)
#undef CONV2D_CUDA_DRIVER_MEMBER

  // `result` as a Status: OK for CUDA_SUCCESS, else Internal "<what>: CUDA_ERROR_X (text)".
  absl::Status Check(CUresult result, const char* what) const;
};

// The process-wide driver table, opened and cuInit'ed on first use. FailedPrecondition
// "no CUDA driver: ..." where libcuda.so.1 cannot be opened or initialised.
absl::StatusOr<const CudaDriver*> GetCudaDriver();

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_CUDA_DRIVER_H_
