// A float's bits and back, host and device: the 3xTF32 split (split_3xtf32.h) rounds them, the
// FFT's cleaning (fft_fused) orders non-negative floats by them.
#ifndef CONV2D_CONV_ARCH_FLOAT_BITS_H_
#define CONV2D_CONV_ARCH_FLOAT_BITS_H_

#include <cstdint>
#include <cstring>

#include "conv/arch/host_device.h"

namespace conv2d {

// A float's bits and back: the intrinsics on the device, memcpy (C++17's bit_cast) on the host.
#if defined(__CUDA_ARCH__)
CONV2D_HOST_DEVICE_INLINE uint32_t FloatBits(float x) { return __float_as_uint(x); }
CONV2D_HOST_DEVICE_INLINE float BitsFloat(uint32_t u) { return __uint_as_float(u); }
#else
template <class To, class From>
CONV2D_HOST_DEVICE_INLINE To HostBitCast(From from) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}
CONV2D_HOST_DEVICE_INLINE uint32_t FloatBits(float x) { return HostBitCast<uint32_t>(x); }
CONV2D_HOST_DEVICE_INLINE float BitsFloat(uint32_t u) { return HostBitCast<float>(u); }
#endif

}  // namespace conv2d

#endif  // CONV2D_CONV_ARCH_FLOAT_BITS_H_
