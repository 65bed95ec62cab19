// conv2d: fp32 2D convolution (NCHW input, OIHW filter; padding, stride, dilation, groups and
// bias as torch.nn.functional.conv2d: conv/shape.h) on NVIDIA GPUs.
//
// Usage, as with cuDNN: device pointers and a stream.
//
//   conv2d::Shape shape{/*batch=*/4, /*in=*/64, /*out=*/64, /*h=*/128, /*w=*/128, /*kh=*/8, /*kw=*/8};
//   shape.pad_top = shape.pad_bottom = shape.pad_left = shape.pad_right = 3;  // optional
//   shape.stride_h = shape.stride_w = 2;                                       // optional
//   absl::StatusOr<conv2d::Plan> plan = conv2d::Plan::Create(shape);  // or Create(shape, "direct")
//   if (!plan.ok()) return plan.status();
//   void* ws = nullptr;
//   cudaMalloc(&ws, plan->workspace_bytes());
//   absl::Status st = plan->Run(x, w, y, ws, plan->workspace_bytes(), stream);  // many times
//
// Plan::Create validates the shape and picks an algorithm ("auto": the fastest registered one that
// implements the shape within the accuracy contract below, if any does). Run checks its arguments
// and enqueues work on `stream`; on error nothing is written.
//
// The accuracy contract (docs/DESIGN.md, "Accuracy"), against fp64 truth y64, per output:
//   - Every algorithm within the contract on the shape (Algorithm::WithinContract; auto picks
//     only those when any takes the shape) meets |y - y64| <= 1e-3 + 1e-3*|y64| on randn data and
//     on data that is not: isolated outliers in x (1e6 among O(1) values) and in w (1e4), a large
//     mean (|N| + 10) with zero-sum filters, sparse inputs, and magnitudes from 1e-17 to 1e17
//     (the bar scaled by the data's scale squared). Measured over every output on the H200.
//   - Direct summation (implicit GEMMs, direct_tiled, triton_igemm, depthwise, grouped_direct,
//     dot, direct) is within it for Cin/groups*Kh*Kw <= 4608; beyond, its error is that of fp32
//     summation (<= Cin/groups*Kh*Kw * 2^-24 * sum |x||w|), which large-mean data takes past the
//     bar.
//     The FFT (fft_fused*) is within it for filters of >= 9 taps: it takes spikes, non-finite
//     values and large means out of its transforms and adds them back exactly, or computes a
//     tile by direct summation in double. fft_depthwise is within it for every filter it takes
//     (up to 63x63): an output whose FFT error estimate (from its tile's and filter's energies)
//     could pass the bar at its value is recomputed by direct summation in fp32.
//   - Outside the contract for every fp32 method: outputs whose window holds several outliers
//     whose contributions cancel to far below their size (the error is then fp32 summation's on
//     those terms), and data beyond ~1e18 in magnitude, where the FFT's spike detection turns off.
//   - Non-finite inputs: an output whose window holds a NaN or an infinity is non-finite (NaN or
//     either infinity), every other output is finite and within the bar; winograd may also make
//     the other outputs of that output's tile non-finite. The padding counts as zeros that are
//     multiplied (as in F.conv2d): a non-finite filter tap reaches every output of its channel.
//   - The geometry (padding, stride, dilation, groups, bias: conv/shape.h) changes none of this:
//     the families that take it (Algorithm::geometry) meet the same bar, measured on the H200 at
//     every layer of ResNet-50, ConvNeXt-T and EfficientNet-B0 (docs/PERF.md, round 86).
//
// The backward (shape.op dgrad or wgrad: conv/shape.h) has the same contract, element by element
// of what it writes (dx; dw and db), against the fp64 gradient g64:
//   - |g - g64| <= 1e-3 + 1e-3*|g64| on randn and on the input classes of the two tensors the
//     operation reads (reference/input_classes.h: dy takes x's classes in dgrad and w's in
//     wgrad), for every algorithm within the contract on the shape (MeetsContract).
//   - dgrad sums (Cout/groups) * ceil(Kh/sh) * ceil(Kw/sw) terms at most (Shape::terms): the
//     forward's rule applies as it is. A stride-1 dgrad run as the forward of dy with the flipped
//     filter (conv/core/transposed_dgrad.h) is the forward's computation and meets its bar.
//   - wgrad sums batch * out_h * out_w terms (100,352 on ResNet-50's 56x56 layers at batch 32),
//     more than one fp32 accumulator can hold within the bar on large-mean data: it is summed
//     in blocks (the tensor core's accumulator over 32 terms, those chunks in fp32 within a slice
//     of at most 4608 terms, the slices added in double in a fixed order), so the error grows
//     like the square root of the chunk count (independent chunk errors), not like the sum's
//     length; beyond 73,728 terms an input channel whose mean outweighs its spread is summed
//     about its mean (x - c, and c * sum(dy) added back in double), so that the terms carry
//     the data's spread, not its mean; db is summed in double. Outliers in x count per channel
//     here: a dw element sums its input channel over every image, so two outliers there may
//     cancel ("outside" above). Depthwise's wgrad centres too, multiplying x's padding as 0
//     and adding back c times, per tap, dy's sum over the pixels whose tap lies inside x (its
//     large kernels' windows are half padding at the edges: -c there is a large term again).
//     Measured (H100, PERF.md round 106): RepLKNet's 31x31 depthwise layer (56x56, batch 32)
//     on the large-mean class 0.15 of the bar (4.08x uncentred, 1.75x with the padding at -c);
//     every depthwise wgrad of the networks within 0.44 of it on every class.
//   - Non-finite: an element whose terms hold a NaN or an infinity is non-finite. In wgrad the
//     padding is zeros that are multiplied, as in the forward: a non-finite dy reaches every tap
//     of its output channel's dw.
//
// Determinism: every operation, the forward included, gives bitwise the same result for the same
// inputs on every call, stream and workspace: no floating-point atomics, and every split of a
// reduction (wgrad's slices, the forward's stream-K pieces) is a function of the shape alone and
// summed in a fixed order.
#ifndef CONV2D_CONV_CONV_H_
#define CONV2D_CONV_CONV_H_

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "conv/shape.h"

typedef struct CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime.h

namespace conv2d {

class Runner;

class Plan {
 public:
  // `algorithm`: "auto" (the model's choice), "autotune" (time every candidate once per shape
  // in this process and keep the fastest; the first Create for a shape takes that long), or a
  // name from Algorithms().
  // "auto" passes over an algorithm that cannot run on this GPU (e.g. implicit_gemm_wgmma off
  // sm_90) to the next best.
  // Errors: InvalidArgument (bad shape), NotFound (unknown algorithm), OutOfRange, Unimplemented or
  // ResourceExhausted (the named algorithm cannot take this shape; the last: its workspace would
  // be over its cap), FailedPrecondition (no CUDA device, or the named algorithm needs another
  // GPU), Internal.
  static absl::StatusOr<Plan> Create(const Shape& shape, absl::string_view algorithm = "auto");

  const Shape& shape() const { return shape_; }
  const std::string& algorithm() const { return algorithm_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  // The CUDA device the plan was made for (current when Create ran); Run must be called with it
  // current.
  int device() const { return device_; }

  // Runs the plan's operation (shape().op) on `t`: its roles by name, exactly the operation's
  // given (conv/shape.h): fprop x, w, y (bias exactly when the shape has_bias); dgrad dy, w,
  // dx; wgrad x, dy, dw (db exactly when the shape has_bias); every other role null.
  // Pointers to dense fp32 tensors of the plan's shape, aligned to 4 bytes, in memory the plan's
  // device can read (its own device memory, managed memory, or mapped pinned host memory).
  // `workspace` may be null only when workspace_bytes() is 0; it needs no alignment (each
  // runner aligns within it: workspace_bytes() includes the slack). A written tensor (y; dx;
  // dw and db) and the workspace must not overlap each other or any other tensor of the call.
  // Errors: InvalidArgument (a role of the operation missing, a role it does not use given, a
  // null, misaligned or unreadable pointer, pageable host memory, memory of another device,
  // workspace too small, overlapping buffers), FailedPrecondition (another device is current),
  // Internal (a CUDA error, with its text). On error nothing is written.
  // Deterministic: the same inputs give bitwise the same result on every call, stream and
  // workspace.
  // Safe to call from several threads on one plan and its copies: the calls are enqueued one at
  // a time. Most algorithms' kernels are enqueued as one CUDA graph launch, made on a stream's
  // first call (at most four streams a plan; others, and a stream being captured into the
  // caller's own graph, get the kernels launched one by one); $CONV2D_GRAPHS=0 turns that off.
  absl::Status Run(const Tensors& t, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream) const;
  // The forward: Run with x, w, bias (null when the shape has none) and y.
  absl::Status Run(const float* x, const float* w, const float* bias, float* y, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream) const;
  // The same without a bias.
  absl::Status Run(const float* x, const float* w, float* y, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream) const {
    return Run(x, w, nullptr, y, workspace, workspace_bytes, stream);
  }

 private:
  Plan(const Shape& shape, std::string algorithm, std::shared_ptr<const Runner> runner,
       int device);
  Shape shape_;
  std::string algorithm_;
  std::shared_ptr<const Runner> runner_;
  struct RunState;  // Run's lock and the call's graphs (plan.cc), shared by copies as the runner is
  std::shared_ptr<RunState> run_state_;
  size_t workspace_bytes_ = 0;
  int device_ = -1;
};

// Names of the registered algorithms, in registration order.
std::vector<std::string> Algorithms();

// The algorithm "auto" would pick for `shape`, or why none can take it. Does not touch the GPU.
absl::StatusOr<std::string> ChooseAlgorithm(const Shape& shape);

// The checks Plan::Run makes before launching anything; exposed for tests.
// ValidateTensors: the operation's roles given and only those (a bias / db exactly when the shape
// has one), aligned to 4 bytes; the workspace's size; no written tensor (or the workspace)
// overlapping another tensor.
absl::Status ValidateTensors(const Shape& shape, const Tensors& t, const void* workspace,
                             size_t workspace_bytes, size_t workspace_needed);
// FailedPrecondition unless `device` is current; InvalidArgument for a pointer `device` cannot
// read: pageable host memory, memory CUDA does not know, or another device's memory. Null
// pointers (roles not used, an empty workspace) are not checked.
absl::Status ValidateDeviceAccess(int device, const Tensors& t, const void* workspace);

}  // namespace conv2d

#endif  // CONV2D_CONV_CONV_H_
