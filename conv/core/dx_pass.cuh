// One pass over dx in dx's order, each pixel written once: the strided dgrad's scatter and the
// fold's gather (transposed_dgrad.cu) and depthwise_dgrad's gather. CTA b takes kDxPassPixels
// consecutive pixels of one (b, c) plane (chunk b % chunks of plane b / chunks), its threads in
// dx's order: coalesced writes, and CTAs enough for the GPU where the planes are few and large
// (ResNet's stem: 96 planes of 224x224). Each thread takes kDxPassVec consecutive pixels, all
// their values before any store (one 16-byte store where dx's plane allows): with one pixel a
// thread, each thread's load waited before its store, and the scatter moved 1.2-1.5 TB/s
// (round 106's ncu: 69 and 105 us on ResNet's 3x3/2 and 1x1/2 dgrads at 56x56).
#ifndef CONV2D_CONV_CORE_DX_PASS_CUH_
#define CONV2D_CONV_CORE_DX_PASS_CUH_

#include <algorithm>
#include <cstdint>

#include "conv/arch/host_device.h"

namespace conv2d {

constexpr int kDxPassPixels = 1024;
constexpr int kDxPassThreads = 256;
constexpr int kDxPassVec = 4;
static_assert(kDxPassPixels % (kDxPassVec * 32) == 0, "chunks of whole vectors a warp");

// The launch: planes x chunks CTAs of up to kDxPassThreads threads (whole warps, fewer for a
// small plane). Planes of fewer than 2^31 pixels.
struct DxPassDims {
  unsigned blocks = 0;
  int threads = 0, chunks = 0;
};
inline DxPassDims DxPassDimsFor(int64_t planes, int64_t plane) {
  DxPassDims d;
  d.chunks = static_cast<int>((plane + kDxPassPixels - 1) / kDxPassPixels);
  const int64_t vectors = (std::min<int64_t>(plane, kDxPassPixels) + kDxPassVec - 1) / kDxPassVec;
  d.threads = static_cast<int>(std::min<int64_t>(kDxPassThreads, (vectors + 31) / 32 * 32));
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
  // A chunk begins at a multiple of kDxPassPixels, so a thread's first pixel i is a multiple of
  // kDxPassVec: d + i is 16-byte aligned wherever d is.
  const bool vector_stores = reinterpret_cast<uintptr_t>(d) % (4 * kDxPassVec) == 0;
  for (int i = begin + kDxPassVec * static_cast<int>(threadIdx.x); i < end;
       i += kDxPassVec * static_cast<int>(blockDim.x)) {
    int y = m.div_w.Div(i), x = i - y * m.w;
    float v[kDxPassVec];
#pragma unroll
    for (int e = 0; e < kDxPassVec; ++e) {
      v[e] = i + e < end ? value(bc, y, x) + z : 0.0f;
      if (++x == m.w) x = 0, ++y;
    }
    if (vector_stores && i + kDxPassVec <= end) {
      *reinterpret_cast<float4*>(d + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
      for (int e = 0; e < kDxPassVec; ++e) {
        if (i + e < end) d[i + e] = v[e];
      }
    }
  }
}
#endif  // __CUDACC__

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_DX_PASS_CUH_
