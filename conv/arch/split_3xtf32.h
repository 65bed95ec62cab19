// The 3xTF32 split, written once for every tensor-core kernel that reaches fp32 accuracy with
// TF32 products (implicit_gemm_3xtf32, implicit_gemm_wgmma, the FFT variants' channel mix
// cgemm_3xtf32 and cgemm_3xtf32_sm90), and for their CPU replays, which run this very code.
// Plain C++, host and device.
//
// Formats. fp32 has 1 sign, 8 exponent and 23 mantissa bits (24 significant). TF32 is fp32 with
// the low 13 mantissa bits zero: 10 explicit mantissa bits, 11 significant. A .tf32 operand of
// mma.sync or wgmma is a 32-bit register (or shared-memory word) holding an fp32 bit pattern.
//
// The split. x = hi + lo with
//   hi = x rounded to TF32, to nearest, ties away from zero: RoundToTf32Bits, which adds half a
//        TF32 ulp (bit 12) to the bits and clears the low 13. For every finite x this is exactly
//        cvt.rna.tf32.f32 (a carry out of the mantissa steps the exponent, which is the correct
//        rounding, subnormals included), in two integer instructions where sm_90's cvt takes four
//        (PERF.md round 44, "rna": 1-4% on implicit_gemm_wgmma). |x - hi| <= 2^-11 |x|.
//   lo = x - hi, computed in fp32 and exact (hi is within a factor 2 of x: Sterbenz), and NOT
//        rounded again: the low bits of lo are left for the tensor core to drop (below).
// A product is then taken as three TF32 products, small terms first,
//   a*b ~ lo_a*hi_b + hi_a*lo_b + hi_a*hi_b,
// dropping lo_a*lo_b (|lo_a lo_b| <= 2^-22 |ab|). hi*hi is exact in the tensor core (11 x 11
// significant bits).
//
// What the tensor core reads. It uses the sign, the exponent and at least the top 10 mantissa
// bits of a .tf32 operand (CUDA documents "10 or more" mantissa bits for TF32, the count
// depending on the hardware); the model here, in every CPU emulation (TensorCoreTf32) and in the
// bounds below, is the worst case: the low 13 bits are truncated away. hi has them clear, so hi
// is read exactly. lo is a multiple of x's fp32 ulp u (2^-23 of x's binade) with |lo| <= 2^12 u,
// so it has at most 12 significant bits (13 only when |lo| = 2^12 u, a single bit): cutting it
// to TF32's 11 drops at most its last bit, |lo - tc(lo)| <= u <= 2^-23 |x|. (Rounding lo first,
// as the split once did, would drop at most u / 2, for one more instruction on every element of
// the inner loop.) With |hi| <= (1 + 2^-11)|x|, each split product is off by
//   |lo_a lo_b| + |hi_a| |lo_b - tc(lo_b)| + |lo_a - tc(lo_a)| |hi_b|
//     <= (2^-22 + 2 (1 + 2^-11) 2^-23) |ab| ~ 2^-21 |ab|,
// mostly the dropped lo_a lo_b (1.5 x 2^-22 with lo rounded), of either sign, i.e. a few fp32
// units of roundoff per product at worst. (Where lo is below 2^-126, fp32's subnormals, the
// truncation drops under 2^-136 in absolute terms instead.) That is small next to the fp32
// accumulation of a long reduction, which is what each kernel's own accuracy argument bounds
// (the folds of implicit_gemm_3xtf32.cu, cgemm_3xtf32.cu's ComputeStage), and it is why the
// three products reach fp32-level accuracy where one TF32 product, off by up to ~2^-10 |ab| even
// with rounded operands, does not (implicit_gemm_3xtf32.h: plain TF32 misses the bar by
// 20-470x).
// Measured (PERF.md rounds 80-81, the FFT mix on the H200): handing lo over unrounded was faster
// (KernelBot geomean 0.280 ms against 0.294 with lo rounded and guarded against NaN) and more
// accurate (worst ratio 0.105 against 0.159) than rounding it. The model predicts the opposite
// for accuracy, if by little, which says the tensor core does not simply truncate lo; the bounds
// above are upper bounds.
//
// Non-finite values (all checked in split_3xtf32_test):
//  - x NaN: hi is whatever the bit addition gives, a NaN, +-inf or +-0 (the GPU's NaN 0x7fffffff
//    carries into the sign bit and becomes -0; 0xffffffff wraps to +0), but lo = x - hi is NaN,
//    a quiet one, whose top mantissa bit survives the truncation. lo_x times
//    the other operand's hi is NaN whatever that hi is, so a NaN reaches every output whose sum
//    uses x. (Rounding lo as well, as the old split did, turned that NaN into a zero: the poisoned
//    input vanished into a finite answer; PERF.md round 80.)
//  - x = +-inf: hi = x, lo = inf - inf = NaN: every output that uses x is NaN, not +-inf.
//  - finite x with |x| >= 2^128 - 2^116 (within half a TF32 ulp of the top): hi rounds to +-inf,
//    as cvt.rna does, lo = -+inf, and the outputs that use x are NaN.
// For finite x below that, hi and lo are finite and hi + lo == x exactly.
#ifndef CONV2D_ARCH_SPLIT_3XTF32_H_
#define CONV2D_ARCH_SPLIT_3XTF32_H_

#include <cstdint>
#include <cstring>

#include "conv/arch/float_bits.h"
#include "conv/arch/host_device.h"

namespace conv2d {

// The bits a TF32 value keeps: sign, exponent, the top 10 mantissa bits.
constexpr uint32_t kTf32Mask = 0xffffe000u;

// hi's rounding: to nearest TF32, ties away from zero (cvt.rna.tf32.f32 for finite values).
CONV2D_HOST_DEVICE_INLINE uint32_t RoundToTf32Bits(uint32_t bits) {
  return (bits + 0x1000u) & kTf32Mask;
}

// Whether an operand is a TF32 value already (low 13 bits clear), as every hi must be.
CONV2D_HOST_DEVICE_INLINE bool IsTf32(uint32_t bits) { return (bits & ~kTf32Mask) == 0; }

// The value the tensor core multiplies when it reads `bits` as a .tf32 operand, in the worst
// case the bounds assume (truncation): for the CPU emulations of mma and wgmma.
CONV2D_HOST_DEVICE_INLINE float TensorCoreTf32(uint32_t bits) {
  return BitsFloat(bits & kTf32Mask);
}

// x = hi + lo (bit patterns, as the mma operands take them): see the top of the file.
CONV2D_HOST_DEVICE_INLINE void SplitTf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = RoundToTf32Bits(FloatBits(x));
#if defined(__CUDA_ARCH__)
  lo = __float_as_uint(__fsub_rn(x, __uint_as_float(hi)));  // an FADD, never fused into an FMA
#else
  lo = FloatBits(x - BitsFloat(hi));
#endif
}

}  // namespace conv2d

#endif  // CONV2D_ARCH_SPLIT_3XTF32_H_
