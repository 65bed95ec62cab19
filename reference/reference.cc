#include "reference/reference.h"

#include <Eigen/Core>
#include <algorithm>
#include <set>

#include "reference/random.h"

namespace conv2d {

namespace {
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The filter as a [Cout, Cin*Kh*Kw] matrix in double.
MatrixD FilterMatrix(const Shape& s, const float* w) {
  const int64_t k = s.in_channels * s.kernel_h * s.kernel_w;
  return Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
             w, s.out_channels, k)
      .cast<double>();
}
}  // namespace

std::vector<double> ReferenceConv(const Shape& s, const float* x, const float* w) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  const int64_t kdim = s.in_channels * s.kernel_h * s.kernel_w;
  const MatrixD wm = FilterMatrix(s, w);
  std::vector<double> y(static_cast<size_t>(s.output_elements()));
  // One output row at a time: im2col of that row, then one double GEMM.
  MatrixD col(kdim, ow);
  MatrixD out(s.out_channels, ow);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t c = 0; c < s.in_channels; ++c) {
        for (int64_t p = 0; p < s.kernel_h; ++p) {
          const float* row = x + ((b * s.in_channels + c) * s.height + i + p) * s.width;
          for (int64_t q = 0; q < s.kernel_w; ++q) {
            const int64_t r = (c * s.kernel_h + p) * s.kernel_w + q;
            for (int64_t j = 0; j < ow; ++j) col(r, j) = row[j + q];
          }
        }
      }
      out.noalias() = wm * col;
      for (int64_t o = 0; o < s.out_channels; ++o) {
        double* dst = y.data() + ((b * s.out_channels + o) * oh + i) * ow;
        for (int64_t j = 0; j < ow; ++j) dst[j] = out(o, j);
      }
    }
  }
  return y;
}

std::vector<double> ReferenceConvAt(const Shape& s, const float* x, const float* w,
                                    const std::vector<int64_t>& positions) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  const int64_t kdim = s.in_channels * s.kernel_h * s.kernel_w;
  const MatrixD wm = FilterMatrix(s, w);
  Eigen::VectorXd col(kdim);
  std::vector<double> y;
  y.reserve(positions.size());
  for (int64_t idx : positions) {
    const int64_t j = idx % ow, i = (idx / ow) % oh;
    const int64_t o = (idx / (ow * oh)) % s.out_channels;
    const int64_t b = idx / (ow * oh * s.out_channels);
    for (int64_t c = 0; c < s.in_channels; ++c) {
      for (int64_t p = 0; p < s.kernel_h; ++p) {
        const float* row = x + ((b * s.in_channels + c) * s.height + i + p) * s.width + j;
        for (int64_t q = 0; q < s.kernel_w; ++q) {
          col((c * s.kernel_h + p) * s.kernel_w + q) = row[q];
        }
      }
    }
    y.push_back(wm.row(o).dot(col));
  }
  return y;
}

std::vector<int64_t> SamplePositions(const Shape& s, int64_t count, uint64_t seed) {
  const int64_t total = s.output_elements();
  std::vector<int64_t> out;
  if (count >= total) {
    out.resize(total);
    for (int64_t i = 0; i < total; ++i) out[i] = i;
    return out;
  }
  std::set<int64_t> chosen;
  const int64_t oh = s.out_h(), ow = s.out_w();
  for (int64_t b : {int64_t{0}, s.batch - 1}) {
    for (int64_t o = 0; o < s.out_channels && static_cast<int64_t>(chosen.size()) < count / 2;
         ++o) {
      const int64_t base = (b * s.out_channels + o) * oh * ow;
      for (int64_t corner : {int64_t{0}, ow - 1, (oh - 1) * ow, oh * ow - 1}) {
        chosen.insert(base + corner);
      }
    }
  }
  uint64_t n = 0;
  while (static_cast<int64_t>(chosen.size()) < count) {
    chosen.insert(static_cast<int64_t>(SplitMix64(seed * 0x2545F4914F6CDD1Dull + n++) %
                                       static_cast<uint64_t>(total)));
  }
  out.assign(chosen.begin(), chosen.end());
  return out;
}

}  // namespace conv2d
