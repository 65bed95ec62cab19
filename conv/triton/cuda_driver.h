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

struct CudaDriver {
  int version = 0;  // cuDriverGetVersion, e.g. 13000
  decltype(&::cuGetErrorName) GetErrorName = nullptr;
  decltype(&::cuGetErrorString) GetErrorString = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) DevicePrimaryCtxRelease = nullptr;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent = nullptr;
  decltype(&::cuCtxGetDevice) CtxGetDevice = nullptr;
  decltype(&::cuCtxPushCurrent) CtxPushCurrent = nullptr;
  decltype(&::cuCtxPopCurrent) CtxPopCurrent = nullptr;
  decltype(&::cuModuleLoadDataEx) ModuleLoadDataEx = nullptr;
  decltype(&::cuModuleUnload) ModuleUnload = nullptr;
  decltype(&::cuModuleGetFunction) ModuleGetFunction = nullptr;
  decltype(&::cuFuncGetAttribute) FuncGetAttribute = nullptr;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute = nullptr;
  decltype(&::cuFuncSetCacheConfig) FuncSetCacheConfig = nullptr;
  decltype(&::cuLaunchKernelEx) LaunchKernelEx = nullptr;

  // `result` as a Status: OK for CUDA_SUCCESS, else Internal "<what>: CUDA_ERROR_X (text)".
  absl::Status Check(CUresult result, const char* what) const;
};

// The process-wide driver table, opened and cuInit'ed on first use. FailedPrecondition
// "no CUDA driver: ..." where libcuda.so.1 cannot be opened or initialised.
absl::StatusOr<const CudaDriver*> GetCudaDriver();

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_CUDA_DRIVER_H_
