// What the CPU replays of the 3xTF32 kernels share: the tensor core's reading of an operand, and
// the accuracy model of a 3xTF32 dot product. The split itself is the kernels' own function
// (conv/arch/split_3xtf32.h), so the replays and the GPU round the same way by construction.
//
// The model (the argument at the top of implicit_gemm_3xtf32.cu, which implicit_gemm_wgmma
// shares): per 8 terms the kernel issues three mma (lo*hi, hi*lo, hi*hi) into one fp32
// accumulator; the tensor core's accumulation is modelled pessimistically, as the exact sum of
// the accumulator and the 8 products rounded toward zero (published measurements on A100 show
// truncation, a bias that adds up over long sums of one sign); every fold_terms terms the
// accumulator is added with IEEE fp32 round-to-nearest into a running sum and restarted. The
// operands are read as the tensor core reads them (truncated to TF32), so the model includes the
// split's own error.
#ifndef CONV2D_CONV_TESTING_CPU_REPLAY_TF32_MODEL_H_
#define CONV2D_CONV_TESTING_CPU_REPLAY_TF32_MODEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "conv/arch/split_3xtf32.h"

namespace conv2d {

// The value an emulated mma multiplies for operand `bits` (TensorCoreTf32). An operand that must
// be a TF32 value already (the split's hi parts; the lo parts keep their low bits on purpose) but
// has bits below TF32 is counted in *dirty: the kernel fed the tensor core something other than
// what the split made.
inline double TensorCoreOperand(uint32_t bits, bool must_be_tf32, int* dirty) {
  if (must_be_tf32 && !IsTf32(bits)) ++*dirty;
  return TensorCoreTf32(bits);
}

// One mma step of the model: c plus the exact sum of 8 products (TF32 x TF32 products are exact
// in double), rounded toward zero to fp32.
inline float MmaTruncating(float c, const float* a, const float* b) {
  double s = c;
  for (int i = 0; i < 8; ++i) s += static_cast<double>(a[i]) * b[i];
  float f = static_cast<float>(s);
  if (std::abs(static_cast<double>(f)) > std::abs(s)) f = std::nextafter(f, 0.0f);
  return f;
}

// The model's signed error on one dot product of length k (fold every fold_terms terms):
// model result (fp32) minus the exact sum.
inline double SignedSplitDotError(const float* x, const float* w, int k, int fold_terms) {
  double exact = 0;
  for (int i = 0; i < k; ++i) exact += static_cast<double>(x[i]) * w[i];
  float acc = 0, sum = 0;
  for (int k0 = 0; k0 < k; k0 += 8) {
    float ah[8], al[8], bh[8], bl[8];
    for (int i = 0; i < 8; ++i) {
      const bool in = k0 + i < k;
      uint32_t hi, lo;
      SplitTf32(in ? x[k0 + i] : 0.f, hi, lo);
      ah[i] = TensorCoreTf32(hi);
      al[i] = TensorCoreTf32(lo);
      SplitTf32(in ? w[k0 + i] : 0.f, hi, lo);
      bh[i] = TensorCoreTf32(hi);
      bl[i] = TensorCoreTf32(lo);
    }
    acc = MmaTruncating(acc, al, bh);
    acc = MmaTruncating(acc, ah, bl);
    acc = MmaTruncating(acc, ah, bh);
    if ((k0 + 8) % fold_terms == 0) {
      sum += acc;
      acc = 0;
    }
  }
  return static_cast<double>(sum + acc) - exact;
}

struct DotModelError {
  double rms = 0, worst = 0;  // absolute, against the exact dot product
};

// `samples` dot products of length k, sample s of x[s*k ..] and w[s*k ..], through the model with
// a fold every fold_terms terms (a multiple of 8; pass more than k for one accumulator).
inline DotModelError SplitDotModel(const float* x, const float* w, int k, int samples,
                                   int fold_terms) {
  double sum_sq = 0, worst = 0;
  for (int s = 0; s < samples; ++s) {
    const double err = std::abs(SignedSplitDotError(x + static_cast<int64_t>(s) * k,
                                                    w + static_cast<int64_t>(s) * k, k,
                                                    fold_terms));
    sum_sq += err * err;
    worst = std::max(worst, err);
  }
  return {std::sqrt(sum_sq / samples), worst};
}

}  // namespace conv2d

#endif  // CONV2D_CONV_TESTING_CPU_REPLAY_TF32_MODEL_H_
