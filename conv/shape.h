// conv2d: the one problem type, Shape: the sizes and the convolution's geometry.
//
// y[b, o, i, j] = bias[o] + sum_{c, p, q} x[b, g*Cg + c, i*sh - pt + p*dh, j*sw - pl + q*dw]
//                                          * w[o, c, p, q]
// with g = o / (Cout / groups) the output channel's group, Cg = Cin / groups, c < Cg, and x read
// as zero outside [0, H) x [0, W) (the padding), exactly as torch.nn.functional.conv2d:
// cross-correlation, x [batch, in_channels, height, width] (NCHW), w [out_channels,
// in_channels / groups, kernel_h, kernel_w] (OIHW), bias [out_channels] (when has_bias),
// y [batch, out_channels, out_h(), out_w()]. All fp32, dense.
//
// The defaults are the basic form every algorithm computes: stride 1, no padding, no dilation,
// one group, no bias, the forward.
//
// The operation (Op) says which of the three convolutions of training a problem is. All three
// have the tensors above; they differ in which they read and which they write:
//   fprop  y  = conv(x, w) + bias                      reads x, w (bias)  writes y
//   dgrad  dx = conv^T(dy, w), the adjoint in x         reads dy, w        writes dx
//   wgrad  dw = the adjoint in w of dy, db = sum of dy  reads x, dy        writes dw (and db)
// with dy shaped as y, dx as x, dw as w, db as the bias:
//   dx[b, c, h, v]  = sum_{o in c's group, p, q} dy[b, o, i, j] * w[o, c - g*Cg, p, q]
//                     over i, j with i*sh - pt + p*dh = h and j*sw - pl + q*dw = v;
//   dw[o, c, p, q]  = sum_{b, i, j} dy[b, o, i, j] * x[b, g*Cg + c, i*sh - pt + p*dh, ...];
//   db[o]           = sum_{b, i, j} dy[b, o, i, j]   (computed by wgrad when has_bias).
// A dgrad problem has no bias (has_bias is wgrad's request for db). Input rows and columns that
// no output window reaches (stride > 1 with a remainder) get dx = 0, as in PyTorch. As the
// forward multiplies its padding's zeros, dgrad multiplies the zeros of dy outside the output
// and between a stride's outputs, and wgrad the padding's: a non-finite filter tap makes every dx
// of its input channel non-finite, a non-finite dy every dw tap of its output channel.
#ifndef CONV2D_CONV_SHAPE_H_
#define CONV2D_CONV_SHAPE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace conv2d {

// The operation (see above). The values are the C ABI's (conv2d_c.h's CONV2D_FPROP...).
enum class Op : int32_t { kFprop = 0, kDgrad = 1, kWgrad = 2 };
inline constexpr Op kAllOps[] = {Op::kFprop, Op::kDgrad, Op::kWgrad};
// "fprop", "dgrad", "wgrad".
const char* OpName(Op op);

// The tensors of one call by role (as cuDNN's frontend names them: x, w, y / dy, w, dx / x, dy,
// dw). Which roles a call uses is its operation's (Shape's comment); the others stay null.
struct Tensors {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  const float* dy = nullptr;
  float* dx = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
};

struct Shape {
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t kernel_h = 0;
  int64_t kernel_w = 0;
  // Zero rows above and below the image, zero columns left and right of it (asymmetric allowed,
  // as cuDNN and ONNX allow).
  int64_t pad_top = 0;
  int64_t pad_bottom = 0;
  int64_t pad_left = 0;
  int64_t pad_right = 0;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t dilation_h = 1;
  int64_t dilation_w = 1;
  int64_t groups = 1;  // divides in_channels and out_channels; depthwise when = in_channels
  bool has_bias = false;
  Op op = Op::kFprop;  // last, so that brace-initialised forward shapes keep their meaning

  // The kernel's extent on the image, dilation included.
  int64_t span_h() const { return dilation_h * (kernel_h - 1) + 1; }
  int64_t span_w() const { return dilation_w * (kernel_w - 1) + 1; }
  int64_t out_h() const { return (height + pad_top + pad_bottom - span_h()) / stride_h + 1; }
  int64_t out_w() const { return (width + pad_left + pad_right - span_w()) / stride_w + 1; }
  int64_t in_per_group() const { return in_channels / groups; }
  int64_t out_per_group() const { return out_channels / groups; }
  // Terms summed per forward output: (Cin / groups) * Kh * Kw.
  int64_t reduction() const { return in_per_group() * kernel_h * kernel_w; }
  // Terms summed per element the operation writes, at most: the forward's reduction(); dgrad's
  // (Cout / groups) * ceil(Kh / sh) * ceil(Kw / sw) (the taps one input pixel meets); wgrad's
  // batch * out_h * out_w (db's as well).
  int64_t terms() const;
  int64_t input_elements() const { return batch * in_channels * height * width; }
  int64_t filter_elements() const { return out_channels * reduction(); }
  int64_t bias_elements() const { return has_bias ? out_channels : 0; }
  int64_t output_elements() const { return batch * out_channels * out_h() * out_w(); }
  // What the operation writes: y (fprop), dx (dgrad), dw followed by db (wgrad; db only when
  // has_bias). Tests, golden files and the reference index the written values this way.
  int64_t written_elements() const;
  // Multiply-adds counted as two operations, as the benchmark's TFLOP/s do; the same for the
  // three operations (each pairs every product of the forward once).
  double flops() const { return 2.0 * static_cast<double>(output_elements()) * reduction(); }
  // Bytes of the minimal traffic: each tensor read or written once (the same four tensors in every
  // operation).
  double min_bytes() const {
    return 4.0 * (input_elements() + filter_elements() + bias_elements() + output_elements());
  }

  bool padded() const { return pad_top != 0 || pad_bottom != 0 || pad_left != 0 || pad_right != 0; }
  bool strided() const { return stride_h != 1 || stride_w != 1; }
  bool dilated() const { return dilation_h != 1 || dilation_w != 1; }
  bool grouped() const { return groups != 1; }
  // Stride 1, no padding, no dilation, one group (bias allowed: Plan::Run adds it to any result).
  bool basic() const { return !padded() && !strided() && !dilated() && !grouped(); }

  // A stable name, e.g. "b4_c64x64_h128w128_k8x8", used by tests, golden files and benchmarks;
  // fields off their defaults append "_p<t>,<b>,<l>,<r>", "_s<h>x<w>", "_d<h>x<w>", "_g<n>",
  // "_bias", and "_dgrad" / "_wgrad" for the backward, so that every basic shape keeps its name.
  std::string ToString() const;

  // The KernelBot parametrisation: (size, kernelsize, channels, batch), Cin = Cout, H = W, Kh = Kw.
  static Shape KernelBot(int64_t size, int64_t kernel, int64_t channels, int64_t batch);

  bool operator==(const Shape& o) const {
    return batch == o.batch && in_channels == o.in_channels && out_channels == o.out_channels &&
           height == o.height && width == o.width && kernel_h == o.kernel_h &&
           kernel_w == o.kernel_w && pad_top == o.pad_top && pad_bottom == o.pad_bottom &&
           pad_left == o.pad_left && pad_right == o.pad_right && stride_h == o.stride_h &&
           stride_w == o.stride_w && dilation_h == o.dilation_h && dilation_w == o.dilation_w &&
           groups == o.groups && has_bias == o.has_bias && op == o.op;
  }
};

// OK when the shape describes a valid convolution, else InvalidArgument with the reason: every
// size positive; stride, dilation and groups at least 1, padding at least 0; groups dividing both
// channel counts; the dilated kernel no larger than the padded image (so the output is not
// empty); every tensor's element count representable in int64 with room to spare; a known
// operation, and no bias on a dgrad problem.
absl::Status ValidateShape(const Shape& shape);

// The roles of `shape.op` bound to four buffers shaped as x, w, the bias and y (dy is shaped as
// y, dx as x, dw as w, db as the bias); `bias` is bound only when the shape has_bias. The one
// place that says which buffer plays which role in which operation.
Tensors BindRoles(const Shape& shape, float* x, float* w, float* bias, float* y);

// OK when every tensor of `shape` can be indexed with 32-bit signed arithmetic, as kernels that use
// int indices require. `who` names the kernel in the error.
absl::Status CheckFitsInt32(const Shape& shape, const char* who);

}  // namespace conv2d

#endif  // CONV2D_CONV_SHAPE_H_
