// The standard shape lists: tests, golden files and benchmarks are built from these.
#ifndef CONV2D_CONV_TESTING_SHAPES_H_
#define CONV2D_CONV_TESTING_SHAPES_H_

#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "conv/shape.h"

namespace conv2d {

// Shape::ToString() as a parameterised test's name: gtest takes [A-Za-z0-9_] only, and the
// geometry's suffixes carry commas ("_p1,1,1,1").
inline std::string GtestName(const Shape& s) {
  std::string n = s.ToString();
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

// KernelBot conv2d test shapes, (size, kernelsize, channels, batch).
inline std::vector<Shape> KernelBotTestShapes() {
  return {Shape::KernelBot(32, 4, 16, 1), Shape::KernelBot(32, 4, 16, 2),
          Shape::KernelBot(64, 4, 32, 1), Shape::KernelBot(64, 8, 32, 2),
          Shape::KernelBot(128, 8, 64, 1)};
}

// KernelBot conv2d benchmark shapes; the third and fourth are the same shape, as in KernelBot.
inline std::vector<Shape> KernelBotBenchmarkShapes() {
  return {Shape::KernelBot(128, 8, 64, 4), Shape::KernelBot(128, 16, 64, 4),
          Shape::KernelBot(256, 16, 128, 2), Shape::KernelBot(256, 16, 128, 2),
          Shape::KernelBot(256, 32, 128, 1)};
}

// The "cnn" benchmark suite (issue 4), (B, Cin, Cout, H = W, K).
inline std::vector<Shape> CnnShapes() {
  auto cnn = [](int64_t b, int64_t cin, int64_t cout, int64_t hw, int64_t k) {
    return Shape{b, cin, cout, hw, hw, k, k};
  };
  return {cnn(32, 64, 64, 56, 3),   cnn(32, 128, 128, 28, 3), cnn(32, 256, 256, 14, 3),
          cnn(32, 512, 512, 9, 3),  cnn(32, 256, 256, 56, 1), cnn(16, 64, 64, 64, 5),
          cnn(8, 3, 64, 224, 7),    cnn(8, 64, 64, 64, 7),    cnn(1, 128, 128, 256, 3),
          cnn(64, 32, 32, 33, 3)};
}

// Edge shapes {batch, in, out, h, w, kh, kw}: K = 1, K = H, odd and unequal H/W, Kh != Kw,
// batch 1, Cin != Cout, 1 and 3 channels, channel counts not multiples of 4.
inline std::vector<Shape> EdgeShapes() {
  return {
      {1, 1, 1, 1, 1, 1, 1},      // smallest
      {2, 3, 8, 17, 17, 1, 1},    // K = 1
      {1, 4, 4, 9, 9, 9, 9},      // K = H = W: one output pixel
      {2, 5, 3, 12, 7, 12, 3},    // Kh = H, Kh != Kw, H != W
      {1, 3, 16, 33, 31, 3, 3},   // RGB-like input, odd sizes
      {3, 7, 13, 19, 23, 5, 4},   // channels not multiples of 4, Kh != Kw
      {1, 1, 6, 40, 36, 32, 32},  // large kernel on a small image
      {2, 13, 5, 21, 64, 2, 7},   // wide image, Kw > Kh
      {1, 16, 24, 64, 48, 16, 8}, // large Kh, Cin != Cout
      {4, 9, 9, 15, 15, 6, 6},    // even kernel, odd image
  };
}

// The edge shapes, KernelBot's test shapes, and the edges of a tiled FFT: 1, 3, 5, 13 channels;
// K = 1 and K = H on non-square images; batch 1; tiles much narrower than they are tall.
inline std::vector<Shape> EdgeAndTestShapes() {
  std::vector<Shape> shapes = EdgeShapes();
  for (const Shape& s : KernelBotTestShapes()) shapes.push_back(s);
  shapes.push_back({1, 5, 1, 10, 3, 10, 1});
  shapes.push_back({3, 13, 13, 17, 29, 17, 29});
  shapes.push_back({2, 1, 3, 2, 300, 1, 3});
  shapes.push_back({1, 3, 5, 100, 2, 7, 2});
  shapes.push_back({1, 13, 1, 40, 36, 32, 32});
  return shapes;
}

// `s` with the geometry beyond the sizes (conv/shape.h): padding top, bottom, left, right;
// stride; dilation; groups; bias.
inline Shape WithGeometry(Shape s, int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t sh,
                          int64_t sw, int64_t dh = 1, int64_t dw = 1, int64_t groups = 1,
                          bool bias = false) {
  s.pad_top = pt;
  s.pad_bottom = pb;
  s.pad_left = pl;
  s.pad_right = pr;
  s.stride_h = sh;
  s.stride_w = sw;
  s.dilation_h = dh;
  s.dilation_w = dw;
  s.groups = groups;
  s.has_bias = bias;
  return s;
}

// `s` as operation `op` (a data gradient has no bias).
inline Shape WithOp(Shape s, Op op) {
  s.op = op;
  if (op == Op::kDgrad) s.has_bias = false;
  return s;
}

// A grouped shape with the same padding on every side and the same stride and dilation both
// ways: the family tests' constructor.
inline Shape GroupedShape(int64_t b, int64_t cin, int64_t cout, int64_t groups, int64_t h,
                          int64_t w, int64_t kh, int64_t kw, int64_t pad = 0, int64_t stride = 1,
                          int64_t dilation = 1, bool bias = false) {
  return WithGeometry(Shape{b, cin, cout, h, w, kh, kw}, pad, pad, pad, pad, stride, stride,
                      dilation, dilation, groups, bias);
}

// Depthwise: c input channels, each with `mult` filters of its own (groups = c, Cout = c * mult).
inline Shape DepthwiseShape(int64_t b, int64_t c, int64_t mult, int64_t h, int64_t w, int64_t kh,
                            int64_t kw, int64_t pad = 0, int64_t stride = 1,
                            int64_t dilation = 1, bool bias = false) {
  return GroupedShape(b, c, c * mult, c, h, w, kh, kw, pad, stride, dilation, bias);
}

// The geometry beyond the basic form, one part at a time and then together, on small odd shapes
// (every output fits a golden file): the golden files' geometry set.
inline std::vector<Shape> GeometryShapes() {
  return {
      // asymmetric padding, every side different, Kh != Kw
      WithGeometry({2, 5, 7, 23, 19, 3, 4}, 2, 0, 1, 3, 1, 1),
      // stride larger than the kernel in both axes (rows and columns skipped)
      WithGeometry({3, 6, 5, 45, 38, 2, 3}, 0, 0, 0, 0, 3, 4),
      // dilation with K = 1 (changes nothing) and with K = 3 (span 5x7)
      WithGeometry({2, 4, 6, 17, 15, 1, 1}, 0, 0, 0, 0, 1, 1, 2, 3),
      WithGeometry({2, 5, 4, 29, 27, 3, 3}, 0, 0, 0, 0, 1, 1, 2, 3),
      // depthwise: groups = Cin = Cout
      WithGeometry({2, 8, 8, 26, 22, 5, 3}, 0, 0, 0, 0, 1, 1, 1, 1, 8),
      // two groups, odd channels per group (3 in, 5 out)
      WithGeometry({2, 6, 10, 21, 18, 4, 3}, 0, 0, 0, 0, 1, 1, 1, 1, 2),
      // a bias alone
      WithGeometry({2, 7, 9, 20, 17, 3, 5}, 0, 0, 0, 0, 1, 1, 1, 1, 1, true),
      // everything at once: asymmetric padding, stride 2x3, dilation 2x1, 3 groups, bias
      WithGeometry({2, 9, 6, 33, 28, 5, 3}, 2, 1, 0, 3, 2, 3, 2, 1, 3, true),
      // depthwise with a channel multiplier of 2, padded, stride 2, dilation 2, bias
      WithGeometry({1, 4, 8, 19, 17, 3, 3}, 1, 1, 1, 1, 2, 2, 2, 2, 4, true),
  };
}

// Networks' geometry at full size (sampled golden files): ResNet's stem (7x7, padding 3,
// stride 2, bias), MobileNet's stride-2 depthwise 3x3 with TensorFlow's "SAME" padding (one
// row and column, bottom and right), DeepLab's dilated 3x3 (dilation 2, padding 2),
// EfficientNet's first 1x1 expansion (a wgrad of 100,352 terms an element) and a squeeze-excite
// 1x1 on a 1x1 image with its bias.
inline std::vector<Shape> NetworkGeometryShapes() {
  return {
      WithGeometry({8, 3, 64, 224, 224, 7, 7}, 3, 3, 3, 3, 2, 2, 1, 1, 1, true),
      WithGeometry({8, 96, 96, 112, 112, 3, 3}, 0, 1, 0, 1, 2, 2, 1, 1, 96, true),
      WithGeometry({4, 64, 64, 33, 33, 3, 3}, 2, 2, 2, 2, 1, 1, 2, 2),
      {8, 16, 96, 112, 112, 1, 1},  // EfficientNet's first expansion: a long 1x1 reduction
      WithGeometry({32, 48, 1152, 1, 1, 1, 1}, 0, 0, 0, 0, 1, 1, 1, 1, 1, true),  // squeeze-excite
  };
}

}  // namespace conv2d

#endif  // CONV2D_CONV_TESTING_SHAPES_H_
