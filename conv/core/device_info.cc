#include "conv/core/device_info.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {

const DeviceInfo& DeviceInfo::ModelDevice() {
  static const DeviceInfo* h200 = [] {
    auto* d = new DeviceInfo;
    d->name = "NVIDIA H200 (the cost models' device)";
    d->cc_major = 9;
    d->cc_minor = 0;
    d->sm_count = 132;
    d->shared_memory_per_block_optin = 232448;
    d->shared_memory_per_sm = 233472;
    d->global_memory_bytes = size_t{143771} << 20;
    return d;
  }();
  return *h200;
}

absl::StatusOr<DeviceInfo> DeviceInfo::Current() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky error so later calls on this thread do not see it
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: ",
        err == cudaSuccess ? "cudaGetDeviceCount found 0 devices" : cudaGetErrorString(err)));
  }
  int ordinal = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&ordinal), "cudaGetDevice"));
  static std::mutex* mu = new std::mutex;
  static auto* cache = new std::map<int, DeviceInfo>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = cache->find(ordinal);
  if (it != cache->end()) return it->second;
  cudaDeviceProp prop;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  d.shared_memory_per_sm = prop.sharedMemPerMultiprocessor;
  d.global_memory_bytes = prop.totalGlobalMem;
  return cache->emplace(ordinal, d).first->second;
}

}  // namespace conv2d
