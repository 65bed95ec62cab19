// SHA-256 (FIPS 180-4), to tie a kernel's metadata to the exact cubin and PTX it describes:
// tools/triton_compile.py records their digests, and the loader refuses a pair that differs.
#ifndef CONV2D_CONV_TRITON_SHA256_H_
#define CONV2D_CONV_TRITON_SHA256_H_

#include <string>

#include "absl/strings/string_view.h"

namespace conv2d {
namespace triton {

// The digest of `data` as 64 lower-case hex digits.
std::string Sha256Hex(absl::string_view data);

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_SHA256_H_
