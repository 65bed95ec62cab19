// The one lifecycle every variant follows, Triton-loaded kernels included:
//   CanImplement(shape) -> Initialize(shape) -> Runner{workspace_bytes(), Run(args)}.
// The registry, the plan, the tests, the regression tool and the benchmark all loop over it.
// Free of CUDA headers so that plain C++ can include it.
#ifndef CONV2D_CONV_ALGORITHM_H_
#define CONV2D_CONV_ALGORITHM_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conv/shape.h"

typedef struct CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime.h

namespace conv2d {

// Device pointers and the stream for one call. Plan::Run has checked them (non-null, workspace
// large enough, no written buffer overlapping another) before a Runner sees them.
struct RunArgs {
  const float* x = nullptr;
  const float* w = nullptr;
  float* y = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

// One algorithm prepared for one shape: owns whatever it built once (FFT plans, handles).
// Run may be called many times, from one thread at a time (Plan::Run holds a lock around it).
class Runner {
 public:
  virtual ~Runner() = default;
  virtual size_t workspace_bytes() const = 0;
  // Enqueues the convolution on args.stream. Nothing is cached across calls by pointer: the filter
  // and the input may change between calls.
  virtual absl::Status Run(const RunArgs& args) const = 0;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // A stable name: lower case, [a-z0-9_], used by Plan::Create, tools and golden results.
  virtual std::string name() const = 0;
  // OK if this algorithm computes `shape` (already validated by ValidateShape) within the accuracy
  // contract; otherwise why not. Must not touch the GPU.
  virtual absl::Status CanImplement(const Shape& shape) const = 0;
  // Builds what the algorithm needs for `shape`. Called once per plan.
  virtual absl::StatusOr<std::unique_ptr<Runner>> Initialize(const Shape& shape) const = 0;
  // A rough time in seconds for `shape` on an H200 (a model fitted to measurements); "auto" picks
  // the smallest among the algorithms that can implement the shape. Reference-only algorithms
  // (oracles) return infinity so that auto never picks them.
  virtual double EstimateSeconds(const Shape& shape) const = 0;
};

}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHM_H_
