// The standard shape lists: tests, golden files and benchmarks are built from these.
#ifndef CONV2D_CONV_TESTING_SHAPES_H_
#define CONV2D_CONV_TESTING_SHAPES_H_

#include <vector>

#include "conv/shape.h"

namespace conv2d {

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

}  // namespace conv2d

#endif  // CONV2D_CONV_TESTING_SHAPES_H_
