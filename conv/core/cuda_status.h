// CUDA errors as absl::Status (internal).
#ifndef CONV2D_CONV_CUDA_STATUS_H_
#define CONV2D_CONV_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace conv2d {

inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(err), " (",
                                          cudaGetErrorString(err), ")"));
}

// The status of the most recent kernel launch on this thread.
inline absl::Status LaunchStatus(const char* kernel) {
  return CudaStatus(cudaGetLastError(), kernel);
}

// Lets a kernel use the device's whole opt-in shared memory per block (optin: DeviceInfo's
// shared_memory_per_block_optin), not just one plan's need: the limit is the kernel's, for the
// whole process, so a later plan of a smaller tile setting its own need would lower it under an
// earlier plan, whose launches would then fail.
inline absl::Status AllowOptinSmem(const void* kernel, int optin, const char* what) {
  return CudaStatus(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin), what);
}

}  // namespace conv2d

#endif  // CONV2D_CONV_CUDA_STATUS_H_
