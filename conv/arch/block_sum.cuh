// The sum over a CTA's threads of one double each, by a fixed tree: the same order on every call,
// so that the reductions built on it are bitwise reproducible (no atomics). Every thread of the
// CTA must call it; the sum is returned to thread 0 (the others get a partial). kThreads is the
// CTA's size, a power of two; `shared` holds kThreads doubles.
#ifndef CONV2D_CONV_ARCH_BLOCK_SUM_CUH_
#define CONV2D_CONV_ARCH_BLOCK_SUM_CUH_

namespace conv2d {

template <int kThreads>
__device__ __forceinline__ double BlockSum(double v, double* shared) {
  static_assert((kThreads & (kThreads - 1)) == 0, "a power of two");
  const int t = static_cast<int>(threadIdx.x);
  shared[t] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) shared[t] += shared[t + half];
    __syncthreads();
  }
  return shared[0];
}

}  // namespace conv2d

#endif  // CONV2D_CONV_ARCH_BLOCK_SUM_CUH_
