#include "reference/reference.h"

#include <Eigen/Core>
#include <algorithm>
#include <set>

#include "reference/random.h"

namespace conv2d {

namespace {
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The filter as a [Cout, Cin/groups*Kh*Kw] matrix in double: group g's rows are its output
// channels.
MatrixD FilterMatrix(const Shape& s, const float* w) {
  return Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
             w, s.out_channels, s.reduction())
      .cast<double>();
}

double BiasOf(const Shape& s, const float* bias, int64_t o) {
  return s.has_bias ? static_cast<double>(bias[o]) : 0.0;
}

// The reduction terms of output pixel (b, i, j) for group g, in the filter's (c, p, q) order,
// written to col[r * stride] (zero where a tap falls in the padding).
template <class Col>
void GatherTerms(const Shape& s, const float* x, int64_t b, int64_t g, int64_t i, int64_t j,
                 Col&& col) {
  const int64_t cg = s.in_per_group();
  for (int64_t c = 0; c < cg; ++c) {
    const float* plane = x + (b * s.in_channels + g * cg + c) * s.height * s.width;
    for (int64_t p = 0; p < s.kernel_h; ++p) {
      const int64_t row = i * s.stride_h - s.pad_top + p * s.dilation_h;
      for (int64_t q = 0; q < s.kernel_w; ++q) {
        const int64_t column = j * s.stride_w - s.pad_left + q * s.dilation_w;
        const bool inside = row >= 0 && row < s.height && column >= 0 && column < s.width;
        col((c * s.kernel_h + p) * s.kernel_w + q) = inside ? plane[row * s.width + column] : 0.0f;
      }
    }
  }
}
}  // namespace

std::vector<double> ReferenceConv(const Shape& s, const float* x, const float* w,
                                  const float* bias) {
  const int64_t oh = s.out_h(), ow = s.out_w(), og = s.out_per_group();
  const MatrixD wm = FilterMatrix(s, w);
  std::vector<double> y(static_cast<size_t>(s.output_elements()));
  // One output row of one group at a time: im2col of that row, then one double GEMM.
  MatrixD col(s.reduction(), ow);
  MatrixD out(og, ow);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t g = 0; g < s.groups; ++g) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          GatherTerms(s, x, b, g, i, j, [&](int64_t r) -> double& { return col(r, j); });
        }
        out.noalias() = wm.middleRows(g * og, og) * col;
        for (int64_t oo = 0; oo < og; ++oo) {
          const int64_t o = g * og + oo;
          double* dst = y.data() + ((b * s.out_channels + o) * oh + i) * ow;
          for (int64_t j = 0; j < ow; ++j) dst[j] = out(oo, j) + BiasOf(s, bias, o);
        }
      }
    }
  }
  return y;
}

std::vector<double> ReferenceConvAt(const Shape& s, const float* x, const float* w,
                                    const std::vector<int64_t>& positions, const float* bias) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  const MatrixD wm = FilterMatrix(s, w);
  Eigen::VectorXd col(s.reduction());
  std::vector<double> y;
  y.reserve(positions.size());
  for (int64_t idx : positions) {
    const int64_t j = idx % ow, i = (idx / ow) % oh;
    const int64_t o = (idx / (ow * oh)) % s.out_channels;
    const int64_t b = idx / (ow * oh * s.out_channels);
    GatherTerms(s, x, b, o / s.out_per_group(), i, j,
                [&](int64_t r) -> double& { return col(r); });
    y.push_back(wm.row(o).dot(col) + BiasOf(s, bias, o));
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
