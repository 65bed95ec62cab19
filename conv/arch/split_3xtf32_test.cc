// The 3xTF32 split (split_3xtf32.h) against its accuracy argument, on the CPU (the kernels run
// the same function): hi is x rounded to TF32 (nearest, ties away), lo = x - hi exactly, what the
// tensor core reads of lo (truncated) stays within the stated bound, the three products within
// theirs, and NaN / inf come out as the header says: an infinity times a finite value is the
// infinity fp32 gives, also summed over a 1x1 layer's channels, not NaN. Each check runs over one
// whole binade of mantissas (both signs), a stride over every bit pattern, the subnormals and the
// overflow edge, for SplitTf32 and SplitTf32Finite. Deliberately wrong splits (hi truncated, hi
// ties-to-even, lo rounded again) are run through the same checks to show that they fail them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "conv/arch/split_3xtf32.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

using SplitFn = void (*)(float, uint32_t&, uint32_t&);

// x rounded to 11 significant bits, ties away from zero, computed independently of the bit
// trick: in double, on the TF32 grid of x's binade (2^-136 apart below 2^-125, where fp32's
// subnormals lose significant bits). +-inf past the largest TF32 value's rounding range.
double ReferenceHi(float x) {
  const double xd = x;
  if (xd == 0) return xd;
  int e;
  std::frexp(xd, &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, std::max(e - 11, -136));
  const double scaled = std::fabs(xd) / ulp;
  const double r = std::copysign(std::floor(scaled + 0.5) * ulp, xd);
  return std::fabs(r) >= std::ldexp(1.0, 128) ? std::copysign(INFINITY, xd) : r;
}

// What a split gives at the overflow edge (finite |x| >= 2^128 - 2^116, which rounds past the
// largest TF32 value): the plain rounding's hi = +-inf and lo = -+inf (SplitTf32Finite), or
// SplitTf32's hi = -0 and lo = x.
enum class Edge { kInfinite, kZeroHi };

// The first violation of the header's claims for a finite x, or "".
std::string CheckFinite(SplitFn split, float x, Edge edge) {
  uint32_t hi, lo;
  split(x, hi, lo);
  const double xd = x, hd = BitsFloat(hi), ld = BitsFloat(lo);
  if (!IsTf32(hi)) return "hi has bits below TF32";
  const double rounded = ReferenceHi(x);
  if (std::isinf(rounded) && edge == Edge::kZeroHi) {
    // The tensor core reads lo = x as TF32: this x's products are TF32's, as the header says.
    return hi == 0x80000000u && lo == FloatBits(x) ? "" : "hi, lo are not -0, x past the edge";
  }
  if (hd != rounded) return "hi is not x rounded to nearest TF32, ties away";
  if (std::isinf(hd)) {  // the overflow edge, rounded: lo = x - hi = -+inf
    return std::isinf(ld) && (ld < 0) == (hd > 0) ? "" : "lo is not -hi at the overflow edge";
  }
  if (ld != xd - hd) return "lo is not x - hi exactly";
  if (BitsFloat(hi) + BitsFloat(lo) != x) return "hi + lo != x in fp32";
  // lo is a multiple of x's ulp u with |lo| <= 2^12 u (half a TF32 ulp), so what the tensor
  // core drops of it is at most u. Where x or lo is below 2^-126 (fp32's subnormals) the TF32
  // grid is 2^-136 and that becomes the bound on what is dropped.
  int e;
  std::frexp(xd, &e);  // |x| in [2^(e-1), 2^e)
  const double u = std::ldexp(1.0, std::max(e - 24, -149));
  if (std::fabs(ld) > 4096 * u) return "|lo| > half a TF32 ulp of x";
  const double lt = TensorCoreTf32(lo);
  if (std::fabs(ld - lt) > std::max(u, std::ldexp(1.0, -136)) ||
      std::fabs(ld - lt) > std::fabs(ld)) {
    return "the tensor core's lo drops more than x's ulp";
  }
  // The split of -x is (-hi, -lo): the mix kernels negate a split by flipping sign bits.
  // (Below the edge: SplitTf32's -0 past it is not negated, which no kernel relies on.)
  uint32_t nhi, nlo;
  split(-x, nhi, nlo);
  if (nhi != (hi ^ 0x80000000u) || BitsFloat(nlo) != -ld) return "split(-x) != -split(x)";
  return "";
}

// Runs CheckFinite over every mantissa of [1, 2) with both signs, the subnormals and the smallest
// normals (stride 7), every 2^32 / 2^24-th finite bit pattern (stride 251), and the overflow edge;
// returns the first violation with its x.
std::string CheckAllFinite(SplitFn split, Edge edge = Edge::kInfinite) {
  auto check_bits = [&](uint32_t bits) -> std::string {
    const float x = BitsFloat(bits);
    if (!std::isfinite(x)) return "";
    std::string e = CheckFinite(split, x, edge);
    return e.empty() ? e : e + " (x bits " + std::to_string(bits) + ")";
  };
  for (uint32_t m = 0; m < (1u << 23); ++m) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      std::string e = check_bits(sign | 0x3f800000u | m);
      if (!e.empty()) return e;
    }
  }
  for (uint32_t bits = 0; bits < 0x01000000u; bits += 7) {  // subnormals, the first normals
    std::string e = check_bits(bits);
    if (!e.empty()) return e;
  }
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 251) {
    std::string e = check_bits(static_cast<uint32_t>(bits));
    if (!e.empty()) return e;
  }
  for (uint32_t bits = 0x7f7fe000u; bits <= 0x7f7fffffu; ++bits) {  // the largest TF32 binade
    std::string e = check_bits(bits);
    if (e.empty()) e = check_bits(bits | 0x80000000u);
    if (!e.empty()) return e;
  }
  return "";
}

TEST(Split3xTf32Test, HiIsRoundedLoIsExactAndTheTruncatedLoStaysInTheBound) {
  EXPECT_EQ(CheckAllFinite(SplitTf32, Edge::kZeroHi), "");
  EXPECT_EQ(CheckAllFinite(SplitTf32Finite, Edge::kInfinite), "");
}

// Below the overflow edge the two splits are the same bits, so SplitTf32's clamps change nothing
// the kernels computed on finite data before them (nor the accuracy model, nor the golden files).
TEST(Split3xTf32Test, TheSplitsAgreeBelowTheEdge) {
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 97) {
    const float x = BitsFloat(static_cast<uint32_t>(bits));
    if (!(std::fabs(x) < BitsFloat(0x7f7ff000u))) continue;
    uint32_t hi, lo, fhi, flo;
    SplitTf32(x, hi, lo);
    SplitTf32Finite(x, fhi, flo);
    ASSERT_EQ(hi, fhi) << std::hex << bits;
    ASSERT_EQ(lo, flo) << std::hex << bits;
  }
}

// The checks above can fail: splits that round hi otherwise, or lo again, do not pass them.
void SplitHiTruncated(float x, uint32_t& hi, uint32_t& lo) {
  hi = FloatBits(x) & kTf32Mask;
  lo = FloatBits(x - BitsFloat(hi));
}
void SplitHiTiesToEven(float x, uint32_t& hi, uint32_t& lo) {
  const uint32_t b = FloatBits(x);
  hi = (b + 0x0fffu + ((b >> 13) & 1u)) & kTf32Mask;
  lo = FloatBits(x - BitsFloat(hi));
}
void SplitLoRounded(float x, uint32_t& hi, uint32_t& lo) {  // the split before round 81
  hi = RoundToTf32Bits(FloatBits(x));
  lo = RoundToTf32Bits(FloatBits(x - BitsFloat(hi)));
}
TEST(Split3xTf32Test, TheChecksCatchWrongSplits) {
  EXPECT_NE(CheckAllFinite(SplitHiTruncated), "");
  EXPECT_NE(CheckAllFinite(SplitHiTiesToEven), "");
  EXPECT_NE(CheckAllFinite(SplitLoRounded), "");
  // Each split's edge claim is its own: neither passes the other's.
  EXPECT_NE(CheckAllFinite(SplitTf32, Edge::kInfinite), "");
  EXPECT_NE(CheckAllFinite(SplitTf32Finite, Edge::kZeroHi), "");
}

// A fixed, well-mixed sequence (SplitMix64), so that the test sees the same values every run.
uint64_t Mix(uint64_t i) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// A finite float of random sign and mantissa, exponent in [-60, 60).
float RandomFloat(uint64_t i) {
  const uint64_t h = Mix(i);
  const uint32_t exponent = 127 - 60 + static_cast<uint32_t>((h >> 32) % 120);
  return BitsFloat(static_cast<uint32_t>(h & 0x807fffffu) | (exponent << 23));
}

// The three products as the tensor core sees their operands (truncated), summed in T: in double
// exactly (11 x 11-bit products, within 2^-33 |ab| of each other's range), in float with the
// accumulator's NaN and inf arithmetic; in the kernels' order, lo_a hi_b + hi_a lo_b + hi_a hi_b.
template <class T, SplitFn kSplit = SplitTf32>
T ThreeProducts(float a, float b) {
  uint32_t ah, al, bh, bl;
  kSplit(a, ah, al);
  kSplit(b, bh, bl);
  const T tah = TensorCoreTf32(ah), tal = TensorCoreTf32(al);
  const T tbh = TensorCoreTf32(bh), tbl = TensorCoreTf32(bl);
  return tal * tbh + tah * tbl + tah * tbh;
}

// The header's bound, (2^-22 + 2 (1 + 2^-11) 2^-23) |ab| ~ 2^-21 |ab|, holds, and is nearly
// reached: it is the bound of this split, not a loose one that a worse split would also meet.
TEST(Split3xTf32Test, ThreeProductsWithinTheBound) {
  const double bound = std::ldexp(1.0, -22) + 2 * (1 + std::ldexp(1.0, -11)) * std::ldexp(1.0, -23);
  double worst = 0;
  for (uint64_t i = 0; i < 2000000; ++i) {
    const float a = RandomFloat(2 * i), b = RandomFloat(2 * i + 1);
    const double exact = static_cast<double>(a) * b;  // 24 x 24 bits: exact in double
    const double rel = std::fabs(ThreeProducts<double>(a, b) - exact) / std::fabs(exact);
    ASSERT_LE(rel, bound) << a << " * " << b;
    worst = std::max(worst, rel);
  }
  std::printf("worst three-product error: 2^%.2f |ab| (bound 2^%.2f)\n", std::log2(worst),
              std::log2(bound));
  EXPECT_GT(worst, bound / 2);
  // One TF32 product would not do: it is off by ~2^-10 |ab|, hundreds of times the bound.
  double worst_one = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const float a = RandomFloat(2 * i), b = RandomFloat(2 * i + 1);
    const double one = static_cast<double>(TensorCoreTf32(FloatBits(a))) *
                       TensorCoreTf32(FloatBits(b));
    worst_one = std::max(worst_one, std::fabs(one - double{a} * b) / std::fabs(double{a} * b));
  }
  EXPECT_GT(worst_one, 256 * bound);
}

// The emulation of the tensor core's read of an fp32 operand as .tf32: the low 13 bits dropped,
// i.e. truncation toward zero to 11 significant bits; exact on TF32 values.
TEST(Split3xTf32Test, TensorCoreReadTruncates) {
  for (uint64_t i = 0; i < 1000000; ++i) {
    const float x = RandomFloat(i);
    const uint32_t bits = FloatBits(x);
    const float t = TensorCoreTf32(bits);
    ASSERT_TRUE(IsTf32(FloatBits(t)));
    ASSERT_EQ(std::signbit(t), std::signbit(x));
    ASSERT_LE(std::fabs(t), std::fabs(x));
    ASSERT_LT(std::fabs(x - t), std::ldexp(std::fabs(t), -10)) << x;
    ASSERT_EQ(TensorCoreTf32(FloatBits(t)), t);
    ASSERT_EQ(IsTf32(bits), t == x);
  }
  EXPECT_EQ(TensorCoreTf32(0x3f801fffu), 1.0f);           // 1 + (2^-10 - 2^-23): down to 1
  EXPECT_EQ(TensorCoreTf32(0xbf801fffu), -1.0f);          // toward zero for negatives too
  EXPECT_EQ(TensorCoreTf32(0x3f802000u), 1.0f + 0x1p-10f);  // a TF32 value: kept
}

// Zeros split into zeros.
TEST(Split3xTf32Test, Zeros) {
  uint32_t hi, lo;
  SplitTf32(0.0f, hi, lo);
  EXPECT_EQ(hi, 0u);
  EXPECT_EQ(lo, 0u);
  SplitTf32(-0.0f, hi, lo);
  EXPECT_EQ(hi, 0x80000000u);
  EXPECT_EQ(BitsFloat(lo), 0.0f);
}

const float kOthers[] = {0.0f, -0.0f, 1.0f, -1.5f, 0x1p-100f, -0x1p-140f, 3.0e38f, INFINITY,
                         -INFINITY};

// A NaN, whatever its bits, makes lo a NaN that survives the tensor core's truncation, and every
// product with it NaN (either operand, any other value, inf and zero included).
TEST(Split3xTf32Test, NanStaysNan) {
  std::vector<uint32_t> nans = {0x7fffffffu, 0xffffffffu, 0x7fc00000u, 0xffc00000u, 0x7ffff000u,
                                0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7f801000u};
  for (uint64_t i = 0; i < 10000; ++i) {
    const uint32_t m = static_cast<uint32_t>(Mix(i)) & 0x807fffffu;
    if ((m & 0x007fffffu) != 0) nans.push_back(0x7f800000u | m);
  }
  for (uint32_t bits : nans) {
    const float x = BitsFloat(bits);
    ASSERT_TRUE(std::isnan(x));
    uint32_t hi, lo;
    SplitTf32(x, hi, lo);
    ASSERT_TRUE(std::isnan(BitsFloat(lo))) << std::hex << bits;
    ASSERT_TRUE(std::isnan(TensorCoreTf32(lo))) << std::hex << bits << ": lo " << lo;
    for (float y : kOthers) {
      ASSERT_TRUE(std::isnan(ThreeProducts<float>(x, y))) << std::hex << bits << " * " << y;
      ASSERT_TRUE(std::isnan(ThreeProducts<float>(y, x))) << y << " * " << std::hex << bits;
    }
  }
  // The GPU's own NaN is the case the split before round 81 lost: the plain rounding's hi
  // carries into the sign bit (-0), and rounding lo too made lo -0 as well, a finite product.
  // SplitTf32 sets hi = -0 for every NaN, and lo = x + 0 quiets a signalling one.
  uint32_t hi, lo;
  SplitTf32Finite(BitsFloat(0x7fffffffu), hi, lo);
  EXPECT_EQ(hi, 0x80000000u);
  SplitLoRounded(BitsFloat(0x7fffffffu), hi, lo);
  EXPECT_TRUE(std::isfinite(BitsFloat(hi)) && std::isfinite(BitsFloat(lo)));
  SplitTf32(BitsFloat(0x7f800001u), hi, lo);
  EXPECT_EQ(hi, 0x80000000u);
  EXPECT_TRUE(std::isnan(TensorCoreTf32(lo)));
}

// The same for the finite-only split: it keeps every NaN too.
TEST(Split3xTf32Test, FiniteSplitKeepsNan) {
  for (uint32_t bits : {0x7fffffffu, 0xffffffffu, 0x7fc00000u, 0x7f800001u, 0xff800001u}) {
    uint32_t hi, lo;
    SplitTf32Finite(BitsFloat(bits), hi, lo);
    EXPECT_TRUE(std::isnan(TensorCoreTf32(lo))) << std::hex << bits;
    for (float y : kOthers) {
      EXPECT_TRUE(std::isnan(ThreeProducts<float, SplitTf32Finite>(BitsFloat(bits), y)));
    }
  }
}

// +-inf times a finite nonzero y is fp32's +-inf (the sign of x times y's), in either operand
// order, for every y the header names: any finite y with |y| >= 2^-137 (the subnormals below
// have hi = 0), up to the overflow edge. inf * 0 is NaN, as in fp32; inf * inf is NaN (fp32:
// +-inf), as the header says. The plain rounding gave NaN for every product with an infinity
// (hi = inf, lo = inf - inf).
TEST(Split3xTf32Test, InfinityTimesFiniteIsInfinity) {
  std::vector<float> ys = {1.0f, -1.0f, 0.5f, 3.0f, -1.5f, 0x1p-100f, -0x1p-126f, 0x1p-136f,
                           4095.0f, -4095.9f, 3.0e-20f, 0.1f, -0.3f, 1.0f + 0x1p-23f,
                           1.0f + 0x1p-11f, 1.0f - 0x1p-24f, 1.0e30f, -3.0e38f, 1.0e5f};
  for (uint64_t i = 0; i < 100000; ++i) ys.push_back(RandomFloat(i));  // both signs of lo
  int checked = 0;
  for (float x : {INFINITY, -INFINITY}) {
    uint32_t hi, lo;
    SplitTf32(x, hi, lo);
    EXPECT_EQ(hi, 0x80000000u);
    EXPECT_EQ(BitsFloat(lo), x);
    for (float y : ys) {
      const float want = x * y;  // fp32: +-inf
      ASSERT_TRUE(std::isinf(want));
      ASSERT_EQ(ThreeProducts<float>(x, y), want) << x << " * " << y;
      ASSERT_EQ(ThreeProducts<float>(y, x), want) << y << " * " << x;
      ++checked;
    }
    EXPECT_TRUE(std::isnan(ThreeProducts<float>(x, 0.0f)));
    EXPECT_TRUE(std::isnan(ThreeProducts<float>(-0.0f, x)));
    EXPECT_TRUE(std::isnan(ThreeProducts<float>(x, INFINITY)));
    // The finite-only split gives NaN: what the implicit GEMMs did before.
    EXPECT_TRUE(std::isnan(ThreeProducts<float, SplitTf32Finite>(x, 1.0f)));
  }
  EXPECT_GT(checked, 200000);
}

// The measured case: a 1x1 layer's output sums Cin products of one pixel's channels with the
// filter; where one channel holds +-inf, fp32 summation gives the infinity (several infinities
// of one sign too, and NaN where products of both signs meet). The 3xTF32 sum, the three
// products per term and an fp32 accumulator folded every 8 terms, must give the same.
TEST(Split3xTf32Test, OneByOneSumWithAnInfinityIsThatInfinity) {
  int infinite = 0, nan = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int cin = 8 * (1 + trial % 40);
    std::vector<float> x(cin), w(cin);
    for (int c = 0; c < cin; ++c) {
      // |x| in [2^-90, 2^30), |w| in [2^-100, 2^20).
      x[c] = RandomFloat(uint64_t{7919} * trial + 2 * c) * 0x1p-30f;
      w[c] = RandomFloat(uint64_t{7919} * trial + 2 * c + 1) * 0x1p-40f;
    }
    const int spikes = 1 + trial % 3;
    for (int k = 0; k < spikes; ++k) {
      const int c = static_cast<int>(Mix(trial * 3 + k) % cin);
      x[c] = (trial % 5 == 0 && k == 1) ? -INFINITY : INFINITY;
    }
    float fp32 = 0, split = 0, acc = 0;
    for (int c = 0; c < cin; ++c) {
      fp32 += x[c] * w[c];
      acc += ThreeProducts<float>(x[c], w[c]);
      if (c % 8 == 7) split += acc, acc = 0;
    }
    if (std::isnan(fp32)) {
      ASSERT_TRUE(std::isnan(split)) << "trial " << trial;
      ++nan;
    } else {
      ASSERT_EQ(split, fp32) << "trial " << trial;
      infinite += std::isinf(fp32);
    }
  }
  EXPECT_GT(infinite, 8000);
  EXPECT_GT(nan, 1000);
}

// Finite values within half a TF32 ulp of the top, |x| >= 2^128 - 2^116, round to +-inf (as
// cvt.rna does) in the plain rounding: lo = -+inf, and the products are NaN. SplitTf32 gives
// hi = -0, lo = x: finite products, TF32's. Just below, both are the plain rounding, finite.
TEST(Split3xTf32Test, OverflowEdge) {
  const float edge = BitsFloat(kTf32OverflowEdgeBits);
  EXPECT_EQ(static_cast<double>(edge), std::ldexp(1.0, 128) - std::ldexp(1.0, 116));
  for (float x : {edge, -edge, std::numeric_limits<float>::max()}) {
    uint32_t hi, lo;
    SplitTf32Finite(x, hi, lo);
    EXPECT_TRUE(std::isinf(BitsFloat(hi)));
    EXPECT_TRUE(std::isnan(ThreeProducts<float, SplitTf32Finite>(x, 0x1p-100f))) << x;
    SplitTf32(x, hi, lo);
    EXPECT_EQ(hi, 0x80000000u);
    EXPECT_EQ(BitsFloat(hi) + BitsFloat(lo), x);
    const float p = ThreeProducts<float>(x, 0x1p-100f);
    EXPECT_TRUE(std::isfinite(p)) << x;
    EXPECT_LE(std::fabs(p - x * 0x1p-100f), std::ldexp(std::fabs(x * 0x1p-100f), -10)) << x;
  }
  const float below = BitsFloat(0x7f7fefffu);
  uint32_t hi, lo;
  SplitTf32(below, hi, lo);
  EXPECT_EQ(hi, 0x7f7fe000u);
  EXPECT_EQ(BitsFloat(hi) + BitsFloat(lo), below);
  EXPECT_TRUE(std::isfinite(ThreeProducts<float>(below, 0x1p-100f)));
}

}  // namespace
}  // namespace conv2d
