// The fp64 reference on the GPU: every output element of a problem, by direct summation with
// double accumulation (products of floats are exact in double), for checks of whole outputs on
// shapes whose CPU reference would take minutes. Non-finite inputs propagate as IEEE arithmetic
// in double does (an output is non-finite exactly when its window holds a non-finite product).
#ifndef CONV2D_REFERENCE_REFERENCE_GPU_H_
#define CONV2D_REFERENCE_REFERENCE_GPU_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "conv/shape.h"

namespace conv2d {

// y64[output_elements()] (device memory) from device x, w and bias (read only when the shape
// has_bias), for every part of the geometry, on `stream`; returns once enqueued.
absl::Status ReferenceConvGpu(const Shape& shape, const float* x, const float* w,
                              const float* bias, double* y64, cudaStream_t stream);

// Every element shape.op writes (Shape::written_elements: y; dx; dw then db), in double, from
// the device tensors of `in` that the operation reads; into out64 (device memory).
absl::Status ReferenceGpu(const Shape& shape, const Tensors& in, double* out64,
                          cudaStream_t stream);

}  // namespace conv2d

#endif  // CONV2D_REFERENCE_REFERENCE_GPU_H_
