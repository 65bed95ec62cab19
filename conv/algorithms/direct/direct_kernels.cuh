// The direct backward by definition, fp64 sums: the kernels of the "direct" oracle's dgrad and
// wgrad (T = float) and of the GPU fp64 reference (T = double, reference/reference_gpu.h), so
// that the oracle and the truth it is checked against in the tests are one piece of code, itself
// checked against the CPU reference by the regression tool. 64-bit indices: any valid shape.
#ifndef CONV2D_CONV_ALGORITHMS_DIRECT_DIRECT_KERNELS_CUH_
#define CONV2D_CONV_ALGORITHMS_DIRECT_DIRECT_KERNELS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "conv/arch/block_sum.cuh"
#include "conv/shape.h"

namespace conv2d {

struct DirectGeometry {
  int64_t batch, cin, cout, h, w, kh, kw, oh, ow;
  int64_t pad_top, pad_left, stride_h, stride_w, dilation_h, dilation_w, cin_g, cout_g;

  static DirectGeometry Of(const Shape& s) {
    return DirectGeometry{s.batch,      s.in_channels, s.out_channels, s.height,     s.width,
                          s.kernel_h,   s.kernel_w,    s.out_h(),      s.out_w(),    s.pad_top,
                          s.pad_left,   s.stride_h,    s.stride_w,     s.dilation_h, s.dilation_w,
                          s.in_per_group(), s.out_per_group()};
  }
};

// Element idx of a dense [n, c, h, w] tensor as its coordinates: the one index map of the
// kernels here and of the forward's (direct.cu).
struct NchwIndex {
  int64_t n, c, row, col;
};
__host__ __device__ inline NchwIndex NchwOf(int64_t idx, int64_t c, int64_t h, int64_t w) {
  return NchwIndex{idx / (w * h * c), (idx / (w * h)) % c, (idx / w) % h, idx % w};
}

// dx, one thread per element (grid-stride): the taps that reach input pixel (h, v) are those
// whose offset h + pt - p*dh is a multiple of the stride landing inside the output; the others
// multiply a zero.
template <typename T>
__global__ void DirectDgradKernel(const float* __restrict__ dy, const float* __restrict__ w,
                                  T* __restrict__ dx, DirectGeometry g) {
  const int64_t total = g.batch * g.cin * g.h * g.w;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const NchwIndex at = NchwOf(idx, g.cin, g.h, g.w);
    const int64_t b = at.n, c = at.c, h = at.row, v = at.col;
    const int64_t group = c / g.cin_g, cl = c - group * g.cin_g;
    double acc = 0;
    for (int64_t oo = 0; oo < g.cout_g; ++oo) {
      const int64_t o = group * g.cout_g + oo;
      const float* dyo = dy + (b * g.cout + o) * g.oh * g.ow;
      const float* wo = w + (o * g.cin_g + cl) * g.kh * g.kw;
      for (int64_t p = 0; p < g.kh; ++p) {
        const int64_t ih = h + g.pad_top - p * g.dilation_h;
        const bool row = ih >= 0 && ih % g.stride_h == 0 && ih / g.stride_h < g.oh;
        for (int64_t q = 0; q < g.kw; ++q) {
          const int64_t jw = v + g.pad_left - q * g.dilation_w;
          const bool in = row && jw >= 0 && jw % g.stride_w == 0 && jw / g.stride_w < g.ow;
          // The zeros of dy outside the output are multiplied, as the forward's padding is: a
          // non-finite tap reaches every dx of its channel (shape.h).
          const double d = in ? static_cast<double>(dyo[ih / g.stride_h * g.ow + jw / g.stride_w])
                              : 0.0;
          acc += d * static_cast<double>(wo[p * g.kw + q]);
        }
      }
    }
    dx[idx] = static_cast<T>(acc);
  }
}

// dw, then db when `db` is not null: one CTA per element, its threads summing fixed strides of
// the batch x output-pixel reduction, then a fixed tree: the same order on every call.
constexpr int kDirectWgradThreads = 256;
template <typename T>
__global__ void __launch_bounds__(kDirectWgradThreads)
    DirectWgradKernel(const float* __restrict__ x, const float* __restrict__ dy,
                      T* __restrict__ dw, T* __restrict__ db, DirectGeometry g) {
  __shared__ double partial[kDirectWgradThreads];
  const int64_t filter = g.cout * g.cin_g * g.kh * g.kw;
  const int64_t e = blockIdx.x;
  const int64_t plane = g.oh * g.ow;
  double acc = 0;
  if (e < filter) {
    const NchwIndex at = NchwOf(e, g.cin_g, g.kh, g.kw);  // w is [cout, cin_g, kh, kw]
    const int64_t o = at.n, cl = at.c, p = at.row, q = at.col;
    const int64_t c = o / g.cout_g * g.cin_g + cl;
    for (int64_t b = 0; b < g.batch; ++b) {
      const float* xc = x + (b * g.cin + c) * g.h * g.w;
      const float* dyo = dy + (b * g.cout + o) * plane;
      for (int64_t pix = threadIdx.x; pix < plane; pix += kDirectWgradThreads) {
        const int64_t i = pix / g.ow, j = pix - i * g.ow;
        const int64_t r = i * g.stride_h - g.pad_top + p * g.dilation_h;
        const int64_t col = j * g.stride_w - g.pad_left + q * g.dilation_w;
        // Padding taps multiply a zero, as in the forward (a non-finite dy there reaches dw).
        const bool inside = r >= 0 && r < g.h && col >= 0 && col < g.w;
        acc += static_cast<double>(dyo[pix]) * (inside ? static_cast<double>(xc[r * g.w + col]) : 0.0);
      }
    }
  } else {
    const int64_t o = e - filter;
    for (int64_t b = 0; b < g.batch; ++b) {
      const float* dyo = dy + (b * g.cout + o) * plane;
      for (int64_t pix = threadIdx.x; pix < plane; pix += kDirectWgradThreads) acc += dyo[pix];
    }
  }
  const double sum = BlockSum<kDirectWgradThreads>(acc, partial);
  if (threadIdx.x != 0) return;
  if (e < filter) {
    dw[e] = static_cast<T>(sum);
  } else {
    db[e - filter] = static_cast<T>(sum);
  }
}

// Enqueues the backward of `s` (s.op dgrad or wgrad) on `stream`: dx from dy and w, or dw (and
// db into `db` when not null) from x and dy.
template <typename T>
cudaError_t LaunchDirectBackward(const Shape& s, const float* x, const float* w, const float* dy,
                                 T* dx, T* dw, T* db, cudaStream_t stream) {
  const DirectGeometry g = DirectGeometry::Of(s);
  if (s.op == Op::kDgrad) {
    constexpr int kThreads = 256;
    const int64_t blocks64 = (s.input_elements() + kThreads - 1) / kThreads;
    const unsigned blocks = static_cast<unsigned>(blocks64 < (1 << 20) ? blocks64 : (1 << 20));
    DirectDgradKernel<T><<<blocks, kThreads, 0, stream>>>(dy, w, dx, g);
  } else {
    const int64_t elements = s.filter_elements() + (db != nullptr ? s.out_channels : 0);
    DirectWgradKernel<T><<<static_cast<unsigned>(elements), kDirectWgradThreads, 0, stream>>>(
        x, dy, dw, db, g);
  }
  return cudaGetLastError();
}

}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DIRECT_DIRECT_KERNELS_CUH_
