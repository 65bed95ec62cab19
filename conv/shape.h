// conv2d: the one problem-shape type.
//
// y[b,o,i,j] = sum_{c,p,q} x[b,c,i+p,j+q] * w[o,c,p,q]  (cross-correlation, stride 1, no padding)
// x: [batch, in_channels, height, width] (NCHW), w: [out_channels, in_channels, kernel_h, kernel_w]
// (OIHW), y: [batch, out_channels, height-kernel_h+1, width-kernel_w+1]. All fp32, dense.
#ifndef CONV2D_CONV_SHAPE_H_
#define CONV2D_CONV_SHAPE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace conv2d {

struct Shape {
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t kernel_h = 0;
  int64_t kernel_w = 0;

  int64_t out_h() const { return height - kernel_h + 1; }
  int64_t out_w() const { return width - kernel_w + 1; }
  int64_t input_elements() const { return batch * in_channels * height * width; }
  int64_t filter_elements() const { return out_channels * in_channels * kernel_h * kernel_w; }
  int64_t output_elements() const { return batch * out_channels * out_h() * out_w(); }
  // Multiply-adds counted as two operations, as the benchmark's TFLOP/s do.
  double flops() const {
    return 2.0 * static_cast<double>(output_elements()) * in_channels * kernel_h * kernel_w;
  }
  // Bytes of the minimal traffic: each input read once, the output written once.
  double min_bytes() const {
    return 4.0 * (input_elements() + filter_elements() + output_elements());
  }

  // A stable name, e.g. "b4_c64x64_h128w128_k8x8", used by tests, golden files and benchmarks.
  std::string ToString() const;

  // The KernelBot parametrisation: (size, kernelsize, channels, batch), Cin = Cout, H = W, Kh = Kw.
  static Shape KernelBot(int64_t size, int64_t kernel, int64_t channels, int64_t batch);

  bool operator==(const Shape& o) const {
    return batch == o.batch && in_channels == o.in_channels && out_channels == o.out_channels &&
           height == o.height && width == o.width && kernel_h == o.kernel_h &&
           kernel_w == o.kernel_w;
  }
};

// OK when the shape describes a valid convolution: every size positive, the kernel no larger than
// the image, and every tensor's element count representable in int64 with room to spare.
absl::Status ValidateShape(const Shape& shape);

// OK when every tensor of `shape` can be indexed with 32-bit signed arithmetic, as kernels that use
// int indices require. `who` names the kernel in the error.
absl::Status CheckFitsInt32(const Shape& shape, const char* who);

}  // namespace conv2d

#endif  // CONV2D_CONV_SHAPE_H_
