// The seeded input generator every test, golden file and benchmark uses.
//
// Element `index` of tensor `tensor` (0 = input x, 1 = filter w, 3 = bias, 4 = the output's
// gradient dy of the backward) for seed `seed` is, with
// key = splitmix64(seed ^ (tensor * 0xD1B54A32D192ED03)):
//   uniform: h = splitmix64(key + index); value = (h >> 40) * 2^-23 - 1   (in [-1, 1))
//   normal:  h1 = splitmix64(key + 2*index), h2 = splitmix64(key + 2*index + 1),
//            u1 = ((h1 >> 11) + 1) * 2^-53, u2 = (h2 >> 11) * 2^-53,
//            value = float(sqrt(-2 ln u1) * cos(2 pi u2))      (Box-Muller, computed in double)
// Normal inputs are what KernelBot draws (torch.randn); the benchmark and the benchmark-shape
// golden files use them, because the error relative to the tolerance grows with the inputs' scale.
// It is exact in fp32 and reproducible anywhere (tools/kernelbot.py mirrors it in numpy):
// a golden file records the seed and shape, not the inputs. Values are real-valued, not small
// integers, so that lost precision shows.
#ifndef CONV2D_REFERENCE_RANDOM_H_
#define CONV2D_REFERENCE_RANDOM_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace conv2d {

constexpr uint32_t kInputTensor = 0;
constexpr uint32_t kFilterTensor = 1;
constexpr uint32_t kBiasTensor = 3;  // 2 is input_classes.h's position picker
constexpr uint32_t kGradTensor = 4;  // dy, shaped as y

inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

enum class Distribution { kUniform, kNormal };

inline uint64_t TensorKey(uint64_t seed, uint32_t tensor) {
  return SplitMix64(seed ^ (uint64_t{tensor} * 0xD1B54A32D192ED03ull));
}

inline float RandomValue(uint64_t seed, uint32_t tensor, uint64_t index) {
  const uint64_t h = SplitMix64(TensorKey(seed, tensor) + index);
  return static_cast<float>(static_cast<double>(h >> 40) * (1.0 / 8388608.0) - 1.0);
}

inline float RandomNormalValue(uint64_t seed, uint32_t tensor, uint64_t index) {
  const uint64_t key = TensorKey(seed, tensor);
  const uint64_t h1 = SplitMix64(key + 2 * index), h2 = SplitMix64(key + 2 * index + 1);
  const double u1 = static_cast<double>((h1 >> 11) + 1) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(h2 >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                            std::cos(6.283185307179586476925 * u2));
}

inline std::vector<float> RandomTensor(uint64_t seed, uint32_t tensor, int64_t count,
                                       Distribution dist = Distribution::kUniform) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    v[i] = dist == Distribution::kNormal ? RandomNormalValue(seed, tensor, i)
                                         : RandomValue(seed, tensor, static_cast<uint64_t>(i));
  }
  return v;
}

inline const char* DistributionName(Distribution d) {
  return d == Distribution::kNormal ? "normal" : "uniform";
}

}  // namespace conv2d

#endif  // CONV2D_REFERENCE_RANDOM_H_
