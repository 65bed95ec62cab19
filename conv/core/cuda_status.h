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

}  // namespace conv2d

#endif  // CONV2D_CONV_CUDA_STATUS_H_
