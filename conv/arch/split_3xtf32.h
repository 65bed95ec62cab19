// The 3xTF32 split, written once for every tensor-core kernel that reaches fp32 accuracy with
// TF32 products (implicit_gemm_3xtf32, implicit_gemm_wgmma, the FFT variants' channel mix
// cgemm_3xtf32 and cgemm_3xtf32_sm90), and for their CPU replays, which run this very code.
// Plain C++, host and device. SplitTf32 takes any fp32 value; SplitTf32Finite, two instructions
// shorter, only values known to be finite and below the overflow edge (the mixes' spectra:
// "Non-finite values" below).
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
// Non-finite values (all checked in split_3xtf32_test). A product must come out as fp32's x*y
// does: +-inf where x is infinite and y finite and nonzero, NaN where either is NaN. The plain
// rounding (SplitTf32Finite) gives an infinite x hi = x and lo = x - hi = inf - inf = NaN: every
// product with it NaN (64 of 131072 outputs of a 1x1 layer with one infinity in x, measured).
// lo = 0 instead would not do either: hi_x lo_y is inf * 0 = NaN where y is a TF32 value, and an
// infinity of the wrong sign where lo_y's sign is not y's (about half the time). So SplitTf32
// carries the infinity in lo, which meets only the other operand's hi (lo_x hi_y), and sets hi
// to -0 for every x at or past the overflow edge (|x| >= 2^128 - 2^116, where the rounding would
// reach inf) and for NaN. (-0, not +0: x - (+0) may be folded to x, x - (-0) = x + 0 may not,
// since it is +0 for x = -0; so the FADD, which quiets a signalling NaN, is always there.)
//  - x = +-inf: hi = -0, lo = x. The products: lo_x hi_y = +-inf with x's sign times y's, the
//    others zeros: fp32's x * y for every finite y but 0 (NaN, as in fp32) and |y| < 2^-137
//    (subnormals whose hi is 0: NaN where fp32 gives +-inf). inf * inf gives NaN (hi_y = -0),
//    not fp32's +-inf: both operands of one product infinite.
//  - finite x at or past the edge: hi = -0, lo = x exactly (hi + lo == x), which the tensor
//    core reads as TF32: those products are TF32's (2^-10 relative), where the plain rounding
//    made them NaN (hi = +-inf, lo = -+inf). Data near 3.4e38 is outside the contract anyway.
//  - x NaN, whatever its bits: hi = -0, lo = x + 0, a quiet NaN (the add sets the top mantissa
//    bit of a signalling one), which survives the tensor core's truncation: every product with
//    x is NaN, so a NaN reaches every output whose sum uses x. (Rounding lo as well, as the
//    split before round 81 did, turned that NaN into a zero.)
// For finite x below the edge, hi and lo are exactly those of the plain rounding above.
// The cost: a comparison of |x| with the edge (FSETP, beside the rounding's add) and a select
// of hi (SEL, after the mask): five instructions where SplitTf32Finite takes three (IADD3, LOP3,
// FADD), the dependency chain one longer; no register. PERF.md round 44 measured 1-4% on
// implicit_gemm_wgmma for two instructions of this split (cvt.rna's four against two), which
// is on the kernels' inner loop. Forms of four exist only with a register: clamping x to the
// largest TF32 value (FMNMX) and the rounded bits by an unsigned min fused with the add
// (VIADDMNMX on sm_90) needs 0x1000 in a register, which ptxas rematerialises at BN = 128 and
// spills around in the BN = 64 tail kernels (sm_90a SASS: +25 and +18 instructions a k-tile
// against this form's +32, with a spill store and load a k-tile at BN = 64), and leaves hi =
// +-3.4e38 times lo_y overflowing to the wrong infinity for |y| >= 2^12. No form of three was
// found: a constant added to the bits and a mask make inf's hi finite only by carrying out of
// the exponent (adding 2^23 ulps, i.e. doubling x), which also moves 0 to 2^-126, so that zeros
// would add 2^-126 lo_y to the sums.
#ifndef CONV2D_ARCH_SPLIT_3XTF32_H_
#define CONV2D_ARCH_SPLIT_3XTF32_H_

#include <cmath>
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

// The overflow edge, 2^128 - 2^116: from here up the rounding's hi is +-inf.
constexpr uint32_t kTf32OverflowEdgeBits = 0x7f7ff000u;

// lo = x - hi, an FADD, never fused into an FMA.
CONV2D_HOST_DEVICE_INLINE uint32_t SplitLo(float x, uint32_t hi) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(__fsub_rn(x, __uint_as_float(hi)));
#else
  return FloatBits(x - BitsFloat(hi));
#endif
}

// x = hi + lo (bit patterns, as the mma operands take them), for any x: see the top of the file.
CONV2D_HOST_DEVICE_INLINE void SplitTf32(float x, uint32_t& hi, uint32_t& lo) {
  // False for NaN too: hi = -0 past the edge, for +-inf and for NaN.
  const bool below_edge = fabsf(x) < BitsFloat(kTf32OverflowEdgeBits);
  hi = below_edge ? RoundToTf32Bits(FloatBits(x)) : 0x80000000u;
  lo = SplitLo(x, hi);
}

// The same for x known to be finite with |x| < 2^128 - 2^116 (the FFT mixes' spectra, whose
// non-finite inputs fft_fused takes out before its transforms); elsewhere it does what the plain
// rounding does: hi = +-inf and lo NaN for x = +-inf, a NaN product where SplitTf32 gives +-inf.
CONV2D_HOST_DEVICE_INLINE void SplitTf32Finite(float x, uint32_t& hi, uint32_t& lo) {
  hi = RoundToTf32Bits(FloatBits(x));
  lo = SplitLo(x, hi);
}

}  // namespace conv2d

#endif  // CONV2D_ARCH_SPLIT_3XTF32_H_
