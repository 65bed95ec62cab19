// What can be read from a kernel's code without a GPU: the architecture a cubin (CUDA ELF) or a
// PTX module was built for, and the kernel's parameter list (count and byte sizes), so that the
// loader can refuse a mismatched artifact before the driver is ever involved.
#ifndef CONV2D_CONV_TRITON_KERNEL_BINARY_H_
#define CONV2D_CONV_TRITON_KERNEL_BINARY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace conv2d {
namespace triton {

struct CodeArch {
  int sm = 0;                    // major*10 + minor: 90 for sm_90 and sm_90a
  bool arch_specific = false;    // the 'a' variant (sm_90a): only the exact compute capability
  bool family_specific = false;  // the 'f' variant (PTX only, sm_100f): the same major
  std::string ToString() const;  // "sm_90a"
};

// OK if code for `arch` runs on a device of compute capability `device_cc` (major*10+minor).
// Machine code (a cubin) runs within its major version on an equal or later minor; PTX is
// JIT-compiled for any later architecture; 'a' code runs on its exact architecture only.
absl::Status CheckArchRunsOn(const CodeArch& arch, bool is_ptx, int device_cc);

struct CubinInfo {
  int abi_version = 0;  // EI_ABIVERSION: 7 (ptxas <= 12.x) or 8 (CUDA 13)
  CodeArch arch;
  std::vector<std::string> kernels;  // every kernel in the module
  std::vector<int> param_sizes;      // the named kernel's parameters by ordinal, in bytes
};

// Parses a cubin's ELF header (architecture from e_flags) and the named kernel's parameter
// table (EIATTR_KPARAM_INFO records of its .nv.info.<kernel> section). Every offset is bounds-
// checked: truncated or corrupt input is an error, never a crash.
absl::StatusOr<CubinInfo> InspectCubin(absl::string_view cubin, absl::string_view kernel);

struct PtxInfo {
  int version_major = 0, version_minor = 0;  // .version
  CodeArch arch;                             // .target
  std::vector<int> param_sizes;              // the named .entry's parameters, in bytes
};

absl::StatusOr<PtxInfo> InspectPtx(absl::string_view ptx, absl::string_view kernel);

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_KERNEL_BINARY_H_
