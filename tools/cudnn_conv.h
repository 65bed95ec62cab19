// The cuDNN fp32 peer the benchmark measures every variant against. FMA math only (no TF32), NCHW,
// cross-correlation, the fastest algorithm cuDNN's own search finds for the shape. The whole
// geometry of conv/shape.h but asymmetric padding (cuDNN's legacy API pads both sides alike):
// padding, stride, dilation, groups (cudnnSetConvolutionGroupCount) and the bias.
// The backward too (shape.op): cudnnConvolutionBackwardData / BackwardFilter (and BackwardBias
// for db), the fastest FMA-math algorithm of each by cuDNN's own search over all of them with the
// workspace each asks for.
// Used only by the benchmark, through tools/benchmark/variants.h; not part of the library.
#ifndef CONV2D_TOOLS_CUDNN_CONV_H_
#define CONV2D_TOOLS_CUDNN_CONV_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conv/shape.h"

typedef struct CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime.h

namespace conv2d {

class CudnnConv {
 public:
  // OK when the peer can take `shape` (validated), else Unimplemented with the reason: only
  // asymmetric padding (pad_top != pad_bottom or pad_left != pad_right), which the legacy
  // cudnnSetConvolution2dDescriptor cannot express. The benchmark reports such a case as n/a.
  // Needs no device.
  static absl::Status Supports(const Shape& shape);

  // Creates a handle and descriptors and runs cuDNN's algorithm search (it allocates and times its
  // own buffers, so it needs a device and free memory). Errors: InvalidArgument (a bad shape, or a
  // dimension that does not fit cuDNN's int), Unimplemented (Supports says no, or no FMA-math
  // algorithm ran), Internal (cuDNN/CUDA errors).
  static absl::StatusOr<std::unique_ptr<CudnnConv>> Create(const Shape& shape);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  const Shape& shape() const { return shape_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // The chosen algorithm, e.g. "IMPLICIT_PRECOMP_GEMM", and what the search measured for it.
  const std::string& algorithm() const { return algorithm_; }
  float search_ms() const { return search_ms_; }

  // The operation on `t`'s roles (conv/shape.h: fprop x, w, bias -> y; dgrad dy, w -> dx;
  // wgrad x, dy -> dw, db) on `stream` (enqueued, not synchronized). The forward's bias is one
  // more cuDNN call (cudnnAddTensor) in the same timed call, as Plan::Run's time includes its
  // bias; wgrad's db likewise (cudnnConvolutionBackwardBias). The output is written without
  // being read first.
  absl::Status Run(const Tensors& t, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream) const;

 private:
  struct Handles;
  explicit CudnnConv(const Shape& shape);
  Shape shape_;
  std::unique_ptr<Handles> h_;
  size_t workspace_bytes_ = 0;
  std::string algorithm_;
  float search_ms_ = 0;
};

// The cuDNN library version actually loaded, e.g. "9.14.0".
std::string CudnnVersion();

}  // namespace conv2d

#endif  // CONV2D_TOOLS_CUDNN_CONV_H_
