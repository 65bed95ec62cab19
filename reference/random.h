// The seeded input generator every test, golden file and benchmark uses.
//
// Element `index` of tensor `tensor` (0 = input x, 1 = filter w) for seed `seed` is
//   h = splitmix64(splitmix64(seed ^ (tensor * 0xD1B54A32D192ED03)) + index)
//   value = (h >> 40) * 2^-23 - 1        (a multiple of 2^-23 in [-1, 1))
// It is exact in fp32 and reproducible anywhere (tools/kernelbot.py mirrors it in numpy):
// a golden file records the seed and shape, not the inputs. Values are real-valued, not small
// integers, so that lost precision shows.
#ifndef CONV2D_REFERENCE_RANDOM_H_
#define CONV2D_REFERENCE_RANDOM_H_

#include <cstdint>
#include <vector>

namespace conv2d {

constexpr uint32_t kInputTensor = 0;
constexpr uint32_t kFilterTensor = 1;

inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline float RandomValue(uint64_t seed, uint32_t tensor, uint64_t index) {
  const uint64_t key = SplitMix64(seed ^ (uint64_t{tensor} * 0xD1B54A32D192ED03ull));
  const uint64_t h = SplitMix64(key + index);
  return static_cast<float>(static_cast<double>(h >> 40) * (1.0 / 8388608.0) - 1.0);
}

inline std::vector<float> RandomTensor(uint64_t seed, uint32_t tensor, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = RandomValue(seed, tensor, static_cast<uint64_t>(i));
  return v;
}

}  // namespace conv2d

#endif  // CONV2D_REFERENCE_RANDOM_H_
