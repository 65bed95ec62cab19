// FastDiv (fast_div.h) against `/` and `%` over the range the kernels use (divisors and
// numerators in [0, 2^31)): every numerator below 2^16 for every divisor up to 2048, and for
// divisors up to 2^31 - 1 (all up to 3000, every power of two and its neighbours, the kernels'
// typical extents, random ones) the numerators where an error would show first, around multiples
// of the divisor and at the top of the range, plus 20000 random ones each. The checks are shown
// to catch a magic number one too small.
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <vector>

#include "conv/arch/fast_div.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr int64_t kTop = int64_t{1} << 31;  // numerators and divisors stay below

uint64_t Mix(uint64_t i) {  // SplitMix64: a fixed sequence
  uint64_t z = i * 0x9E3779B97F4A7C15ull + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The numerators checked for divisor d: the edges of the range, both sides of the first and the
// last multiples of d, and random ones.
std::vector<int64_t> Numerators(int64_t d, uint64_t seed) {
  std::vector<int64_t> ns = {0, 1, kTop - 1, kTop - 2};
  const int64_t last = (kTop - 1) / d * d;  // the largest multiple of d below 2^31
  for (int64_t q : {int64_t{1}, int64_t{2}, int64_t{3}, last / d - 1, last / d}) {
    for (int64_t delta : {-1, 0, 1}) ns.push_back(q * d + delta);
  }
  for (int i = 0; i < 20000; ++i) {
    ns.push_back(static_cast<int64_t>(Mix(seed * 100000 + i) % kTop));
  }
  std::vector<int64_t> out;
  for (int64_t n : ns) {
    if (n >= 0 && n < kTop) out.push_back(n);
  }
  return out;
}

std::vector<int64_t> Divisors() {
  std::vector<int64_t> ds;
  for (int64_t d = 1; d <= 3000; ++d) ds.push_back(d);
  for (int k = 1; k < 31; ++k) {
    for (int64_t delta : {-1, 0, 1}) ds.push_back((int64_t{1} << k) + delta);
  }
  // Extents the kernels divide by: output planes, widths, kernel areas, tile counts.
  const int64_t extents[] = {25,    49,    54,      55,   100,  113,  121,   196,
                             241,   784,   1000,    3025, 3136, 12544, 50176, 50625,
                             1000003, (int64_t{1} << 30) + 3, 2147483647};
  for (int64_t d : extents) ds.push_back(d);
  for (uint64_t i = 0; i < 3000; ++i) ds.push_back(1 + static_cast<int64_t>(Mix(i) % (kTop - 1)));
  return ds;
}

TEST(FastDivTest, EveryNumeratorBelow2To16ForEveryDivisorUpTo2048) {
  for (uint32_t d = 1; d <= 2048; ++d) {
    const FastDiv f(d);
    for (int n = 0; n < (1 << 16); ++n) {
      int q, r;
      f.DivMod(n, &q, &r);
      if (q != n / static_cast<int>(d) || r != n % static_cast<int>(d)) {
        FAIL() << n << " / " << d << ": got " << q << " r " << r;
      }
    }
  }
}

TEST(FastDivTest, EdgesOfTheRangeForDivisorsUpTo2To31) {
  uint64_t seed = 0;
  for (int64_t d : Divisors()) {
    ASSERT_TRUE(d >= 1 && d < kTop) << d;
    const FastDiv f(static_cast<uint32_t>(d));
    for (int64_t n : Numerators(d, ++seed)) {
      int q, r;
      f.DivMod(static_cast<int>(n), &q, &r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
      ASSERT_EQ(f.Div(static_cast<int>(n)), q);
    }
  }
}

// A default FastDiv divides by 1 (so a Params left at its defaults is harmless).
TEST(FastDivTest, DefaultDividesByOne) {
  const FastDiv f;
  for (int n : {0, 1, 12345, std::numeric_limits<int>::max()}) EXPECT_EQ(f.Div(n), n);
  const FastDiv one(1);
  EXPECT_EQ(one.mul, f.mul);
  EXPECT_EQ(one.shift, f.shift);
}

// The numerators above are where an off-by-one magic number shows: with mul one too small,
// every divisor that is not a power of two (whose magic is exact) fails somewhere.
TEST(FastDivTest, TheChecksCatchAWrongMagicNumber) {
  uint64_t seed = 0;
  int caught = 0, tried = 0;
  for (int64_t d : Divisors()) {
    ++seed;
    if ((d & (d - 1)) == 0) continue;
    FastDiv f(static_cast<uint32_t>(d));
    --f.mul;
    ++tried;
    for (int64_t n : Numerators(d, seed)) {
      if (f.Div(static_cast<int>(n)) != n / d) {
        ++caught;
        break;
      }
    }
  }
  EXPECT_EQ(caught, tried);
}

}  // namespace
}  // namespace conv2d
