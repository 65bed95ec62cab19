// What a Triton kernel's metadata (.json) says, validated before anything else is believed: the
// run-time parameter types as Triton spells them, the Triton versions whose launch convention
// the loader implements, and the launch parameters (warps, CTAs, shared memory, scratch
// buffers, target). Part of the loader (triton_kernel.h), apart because it needs neither the
// code nor a driver.
#ifndef CONV2D_CONV_TRITON_METADATA_H_
#define CONV2D_CONV_TRITON_METADATA_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace conv2d {
namespace triton {

// A run-time parameter type, as Triton spells it in signatures.
enum class ArgType { kPointer, kI1, kI8, kI16, kI32, kI64, kU1, kU8, kU16, kU32, kU64, kFp16,
                     kBf16, kFp32, kFp64 };

// "*fp32" (any pointer), "i32", "fp32", ... Tensor descriptors and constexpr are refused.
absl::StatusOr<ArgType> ParseArgType(absl::string_view triton_type);
// "*", "i32", "fp32", ...
std::string ArgTypeName(ArgType type);
// Bytes the kernel parameter takes (Triton's ty_to_cpp / FLOAT_STORAGE_TYPE).
int ArgTypeSize(ArgType type);
// "*,*,i32": a parameter list in errors.
std::string SignatureString(absl::Span<const ArgType> types);

// The Triton versions whose launch convention this loader implements (checked against their
// launcher source): major.minor.
bool IsSupportedTritonVersion(absl::string_view version);

struct KernelMetadata {
  std::string name;
  int num_warps = 0;
  int num_ctas = 1;
  int shared = 0;
  int64_t global_scratch_size = 0;
  int64_t global_scratch_align = 1;
  int64_t profile_scratch_size = 0;
  int64_t profile_scratch_align = 1;
  bool launch_pdl = false;
  bool launch_cooperative_grid = false;
  std::string triton_version;
  std::string target_backend;
  int target_arch = 0;
  int warp_size = 0;
  bool has_signature = false;  // signature/arg_names present
  std::vector<ArgType> signature;
  std::vector<std::string> arg_names;
  std::string cubin_sha256;  // empty if absent
  std::string ptx_sha256;
  // The integer (and boolean) constexpr values the code was compiled with, if recorded
  // (tools/triton_compile.py does), e.g. {"BLOCK_M", 128}: launch code reads tile sizes here
  // instead of repeating them.
  std::vector<std::pair<std::string, int64_t>> constexprs;
  // The constexpr named `key`, or NotFound.
  absl::StatusOr<int64_t> Constexpr(absl::string_view key) const;
};

// Parses and validates metadata JSON: required fields present with the right types and sane
// values, a supported Triton version, target backend "cuda" with warp size 32.
absl::StatusOr<KernelMetadata> ParseMetadata(absl::string_view json);

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_METADATA_H_
