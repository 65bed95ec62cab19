// The integer helpers of the planners and kernels (tile counts, buffer alignment, power-of-two
// tile sizes), each written once. constexpr and host+device, so a kernel, its planner and its
// CPU test agree on every count by construction.
//
// All take non-negative operands in the planners' 64-bit range (sizes and counts well below
// 2^62, which the callers' shape checks guarantee); none guards against overflow. The byte
// counts that may overflow (workspace sizes of absurd shapes) saturate instead: see the FFT
// planners' Saturating* helpers (fft_tiled_internal.h), which build on these.
#ifndef CONV2D_ARCH_INT_MATH_H_
#define CONV2D_ARCH_INT_MATH_H_

#include <cstdint>

#include "conv/arch/host_device.h"

namespace conv2d {

// ceil(a / b) for a >= 0, b >= 1.
CONV2D_HOST_DEVICE constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The least multiple of `multiple` (>= 1) that is >= n >= 0.
CONV2D_HOST_DEVICE constexpr int64_t RoundUp(int64_t n, int64_t multiple) {
  return CeilDiv(n, multiple) * multiple;
}

CONV2D_HOST_DEVICE constexpr bool IsPow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The least l >= 0 with 2^l >= n: log2 of a power of two, rounded up otherwise (0 for n <= 1).
CONV2D_HOST_DEVICE constexpr int CeilLog2(int64_t n) {
  int l = 0;
  while ((int64_t{1} << l) < n) ++l;
  return l;
}

}  // namespace conv2d

#endif  // CONV2D_ARCH_INT_MATH_H_
