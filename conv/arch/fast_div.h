// Division by a run-time constant without a division instruction, for the kernels' per-element
// index arithmetic (a pixel index into image, row and column; an item index into its parts).
// The GPU has no integer divider: `n / d` with d unknown at compile time compiles to a sequence
// built on a float reciprocal with integer corrections, while this is a high multiply, an add
// and a shift. Made once on the host per shape
// (the constructor loops), used in the kernels and, unchanged, in their CPU replays.
//
// Method (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994;
// the form CUTLASS's FastDivmod uses): for 1 <= d < 2^31 let s = ceil(log2 d) and
// m = floor(2^32 (2^s - d) / d) + 1, which is < 2^32 because 2^s - d < d. Then for 0 <= n < 2^31
//     floor(n / d) = (umulhi(n, m) + n) >> s.
// Why: M = 2^32 + m = floor(2^(32+s) / d) + 1 = 2^(32+s) / d + e with 0 < e <= 1, and
// umulhi(n, m) + n = floor(n M / 2^32), so the shift gives floor(n / d + n e / 2^(32+s)); the
// excess n e / 2^(32+s) < 2^31 / 2^(32+s) <= 1 / (2d) never reaches the next multiple of 1/d
// past n / d. The add cannot wrap: umulhi(n, m) < n < 2^31. fast_div_test checks the claim
// exhaustively over small divisors and numerators and at the edges of the whole range.
// Outside that range (n < 0, n >= 2^31, d < 1, d >= 2^31) the result may be wrong: every caller
// bounds its indices below 2^31 (the kernels' CheckIndexing, the planners' int32 checks).
#ifndef CONV2D_ARCH_FAST_DIV_H_
#define CONV2D_ARCH_FAST_DIV_H_

#include <cstdint>

#include "conv/arch/host_device.h"

namespace conv2d {

struct FastDiv {
  uint32_t divisor = 1;
  uint32_t mul = 1;  // FastDiv(1)'s: a default-constructed FastDiv divides by 1
  uint32_t shift = 0;

  FastDiv() = default;
  // 1 <= d < 2^31.
  explicit FastDiv(uint32_t d) : divisor(d) {
    uint32_t l = 0;
    while ((uint64_t{1} << l) < d) ++l;
    shift = l;
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << l) - d)) / d + 1);
  }

  // floor(n / divisor) for 0 <= n < 2^31.
  CONV2D_HOST_DEVICE_INLINE int Div(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(u, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{u} * mul) >> 32);
#endif
    return static_cast<int>((hi + u) >> shift);
  }
  // n = q * divisor + r, 0 <= r < divisor, for 0 <= n < 2^31.
  CONV2D_HOST_DEVICE_INLINE void DivMod(int n, int* q, int* r) const {
    *q = Div(n);
    *r = n - *q * static_cast<int>(divisor);
  }
};

}  // namespace conv2d

#endif  // CONV2D_ARCH_FAST_DIV_H_
