// Device memory owned by a scope, freed on every path out (errors and early returns included):
// the one such type for the library (autotune's inputs, the L2 flush buffer of timing.h), the
// tools, the testbed and the GPU tests.
#ifndef CONV2D_CONV_CORE_DEVICE_BUFFER_H_
#define CONV2D_CONV_CORE_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/statusor.h"
#include "conv/core/cuda_status.h"

namespace conv2d {

struct DeviceBuffer {
  // `bytes` of device memory; none (p stays null) for 0, as a variant without a workspace gets.
  // `what` names the buffer in the error.
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes, const char* what = "cudaMalloc") {
    DeviceBuffer b;
    if (bytes > 0) {
      absl::Status s = CudaStatus(cudaMalloc(&b.p, bytes), what);
      if (!s.ok()) return s;
    }
    return b;
  }

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p(o.p) { o.p = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      cudaFree(p);
      p = o.p;
      o.p = nullptr;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }

  // Public, so that a gtest can allocate with ASSERT_EQ(cudaMalloc(&b.p, n), cudaSuccess) and
  // still have it freed.
  void* p = nullptr;
};

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_DEVICE_BUFFER_H_
