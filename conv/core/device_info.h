// The facts about a GPU that algorithms plan with, read once per device and cached, so that no
// kernel hard-codes an SM count or a shared-memory size, and Propose/Initialize see the same
// numbers. Free of CUDA headers.
#ifndef CONV2D_CONV_CORE_DEVICE_INFO_H_
#define CONV2D_CONV_CORE_DEVICE_INFO_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace conv2d {

struct DeviceInfo {
  int ordinal = -1;  // the CUDA device ordinal; -1 for ModelDevice()
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  size_t shared_memory_per_block_optin = 0;  // the most one block may opt in to
  size_t shared_memory_per_sm = 0;
  size_t global_memory_bytes = 0;

  bool is_sm90() const { return cc_major == 9 && cc_minor == 0; }

  // The device the cost models were fitted on (an H200: sm_90, 132 SMs, 227 KiB of shared memory
  // per block). ChooseAlgorithm ranks against it, so that the choice needs no GPU.
  static const DeviceInfo& ModelDevice();
  // The current CUDA device's facts, read the first time each device is asked for.
  // FailedPrecondition when there is no CUDA device.
  static absl::StatusOr<DeviceInfo> Current();
};

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_DEVICE_INFO_H_
