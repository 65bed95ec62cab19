// One pass over dx in dx's order, each pixel written once: the strided dgrad's scatter and the
// fold's gather (transposed_dgrad.cu) and depthwise_dgrad's gather. CTA b takes kDxPassPixels
// consecutive pixels of one (b, c) plane (chunk b % chunks of plane b / chunks), its threads in
// dx's order: coalesced writes, and CTAs enough for the GPU where the planes are few and large
// (ResNet's stem: 96 planes of 224x224).
#ifndef CONV2D_CONV_CORE_DX_PASS_CUH_
#define CONV2D_CONV_CORE_DX_PASS_CUH_

#include <algorithm>
#include <cstdint>

#include "conv/arch/host_device.h"

namespace conv2d {

constexpr int kDxPassPixels = 1024;
constexpr int kDxPassThreads = 256;

// The launch: planes x chunks CTAs of up to kDxPassThreads threads (whole warps, fewer for a
// small plane). Planes of fewer than 2^31 pixels.
struct DxPassDims {
  unsigned blocks = 0;
  int threads = 0, chunks = 0;
};
inline DxPassDims DxPassDimsFor(int64_t planes, int64_t plane) {
  DxPassDims d;
  d.chunks = static_cast<int>((plane + kDxPassPixels - 1) / kDxPassPixels);
  d.threads = static_cast<int>(std::min<int64_t>(kDxPassThreads, (plane + 31) / 32 * 32));
  d.blocks = static_cast<unsigned>(planes * d.chunks);
  return d;
}

// CTA `block`'s pixels: [begin, end) of plane bc (= b*C + c) of `plane` pixels.
struct DxPassChunk {
  int64_t bc = 0;
  int begin = 0, end = 0;
};
CONV2D_HOST_DEVICE_INLINE DxPassChunk DxPassChunkOf(int64_t block, int chunks, int plane) {
  DxPassChunk c;
  c.bc = block / chunks;
  c.begin = static_cast<int>(block - c.bc * chunks) * kDxPassPixels;
  c.end = plane - c.begin < kDxPassPixels ? plane : c.begin + kDxPassPixels;
  return c;
}

#if defined(__CUDACC__)
// dx[bc, y, x] = value(bc, y, x) + zero(chunk) over this CTA's chunk; `m` has the plane's h, w
// and div_w (ScatterMap, FoldMap). zero(chunk) is called once by every thread of the CTA before
// any value (it may vote, and stage the chunk's inputs in shared memory).
template <typename Map, typename Zero, typename Value>
__device__ __forceinline__ void DxPass(const Map& m, float* __restrict__ dx, int chunks, Zero zero,
                                       Value value) {
  const DxPassChunk ch = DxPassChunkOf(blockIdx.x, chunks, m.h * m.w);  // plane < 2^31
  const int64_t bc = ch.bc;
  const int plane = m.h * m.w, begin = ch.begin, end = ch.end;
  const float z = zero(ch);
  float* d = dx + bc * plane;
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += static_cast<int>(blockDim.x)) {
    const int y = m.div_w.Div(i);
    d[i] = value(bc, y, i - y * m.w) + z;
  }
}
#endif  // __CUDACC__

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_DX_PASS_CUH_
