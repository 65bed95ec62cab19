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
  const int64_t total = s.written_elements();
  std::vector<int64_t> out;
  if (count >= total) {
    out.resize(total);
    for (int64_t i = 0; i < total; ++i) out[i] = i;
    return out;
  }
  std::set<int64_t> chosen;
  // The written tensor as [n, c, h, w] planes: y [B, Cout, oh, ow]; dx [B, Cin, H, W];
  // dw [Cout, Cin/groups, Kh, Kw] (then db).
  int64_t n = s.batch, c = s.out_channels, h = s.out_h(), w = s.out_w();
  if (s.op == Op::kDgrad) c = s.in_channels, h = s.height, w = s.width;
  if (s.op == Op::kWgrad) n = s.out_channels, c = s.in_per_group(), h = s.kernel_h, w = s.kernel_w;
  for (int64_t b : {int64_t{0}, n - 1}) {
    for (int64_t o = 0; o < c && static_cast<int64_t>(chosen.size()) < count / 2; ++o) {
      const int64_t base = (b * c + o) * h * w;
      for (int64_t corner : {int64_t{0}, w - 1, (h - 1) * w, h * w - 1}) {
        chosen.insert(base + corner);
      }
    }
  }
  for (int64_t k = n * c * h * w; k < total && static_cast<int64_t>(chosen.size()) < count; ++k) {
    chosen.insert(k);  // db
  }
  uint64_t k = 0;
  while (static_cast<int64_t>(chosen.size()) < count) {
    chosen.insert(static_cast<int64_t>(SplitMix64(seed * 0x2545F4914F6CDD1Dull + k++) %
                                       static_cast<uint64_t>(total)));
  }
  out.assign(chosen.begin(), chosen.end());
  return out;
}

namespace {

// The input row (or column) that tap p of output row i reads: i*stride - pad + p*dilation.
inline int64_t Tap(int64_t i, int64_t p, int64_t stride, int64_t pad, int64_t dilation) {
  return i * stride - pad + p * dilation;
}

// dx whole: the adjoint of the forward's gather. Per output row of a group, T = W_g^T dy_rows
// (one double GEMM), then each of T's terms is added to the input pixel its tap read.
// 0 * (the sum of the filters at input channel c): 0 where they are finite, NaN where one is
// not. dgrad multiplies the zeros of dy outside the output (and between a stride's outputs), as the
// forward multiplies its padding, so that a non-finite tap reaches every dx of its channel.
double ZeroTermsOf(const Shape& s, const float* w, int64_t c) {
  const int64_t cg = s.in_per_group(), og = s.out_per_group(), taps = s.kernel_h * s.kernel_w;
  double sum = 0;
  for (int64_t oo = 0; oo < og; ++oo) {
    const float* f = w + ((c / cg * og + oo) * cg + c % cg) * taps;
    for (int64_t t = 0; t < taps; ++t) sum += f[t];
  }
  return 0.0 * sum;
}

std::vector<double> ReferenceDgrad(const Shape& s, const float* dy, const float* w) {
  const int64_t oh = s.out_h(), ow = s.out_w(), og = s.out_per_group(), cg = s.in_per_group();
  const MatrixD wm = FilterMatrix(s, w);
  std::vector<double> dx(static_cast<size_t>(s.input_elements()), 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t c = 0; c < s.in_channels; ++c) {
      const double zero = ZeroTermsOf(s, w, c);
      double* plane = dx.data() + (b * s.in_channels + c) * s.height * s.width;
      for (int64_t i = 0; i < s.height * s.width; ++i) plane[i] = zero;
    }
  }
  MatrixD rows(og, ow), t(s.reduction(), ow);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t g = 0; g < s.groups; ++g) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t oo = 0; oo < og; ++oo) {
          const float* src = dy + ((b * s.out_channels + g * og + oo) * oh + i) * ow;
          for (int64_t j = 0; j < ow; ++j) rows(oo, j) = src[j];
        }
        t.noalias() = wm.middleRows(g * og, og).transpose() * rows;
        for (int64_t c = 0; c < cg; ++c) {
          double* plane = dx.data() + (b * s.in_channels + g * cg + c) * s.height * s.width;
          for (int64_t p = 0; p < s.kernel_h; ++p) {
            const int64_t row = Tap(i, p, s.stride_h, s.pad_top, s.dilation_h);
            if (row < 0 || row >= s.height) continue;
            for (int64_t q = 0; q < s.kernel_w; ++q) {
              const int64_t r = (c * s.kernel_h + p) * s.kernel_w + q;
              for (int64_t j = 0; j < ow; ++j) {
                const int64_t col = Tap(j, q, s.stride_w, s.pad_left, s.dilation_w);
                if (col >= 0 && col < s.width) plane[row * s.width + col] += t(r, j);
              }
            }
          }
        }
      }
    }
  }
  return dx;
}

double BiasGradAt(const Shape& s, const float* dy, int64_t o) {
  const int64_t plane = s.out_h() * s.out_w();
  double sum = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* p = dy + (b * s.out_channels + o) * plane;
    for (int64_t i = 0; i < plane; ++i) sum += p[i];
  }
  return sum;
}

// dw whole (then db): per output row of a group, dW_g += dy_rows * im2col(row)^T.
std::vector<double> ReferenceWgrad(const Shape& s, const float* x, const float* dy) {
  const int64_t oh = s.out_h(), ow = s.out_w(), og = s.out_per_group();
  MatrixD dw = MatrixD::Zero(s.out_channels, s.reduction());
  MatrixD rows(og, ow), col(s.reduction(), ow);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t g = 0; g < s.groups; ++g) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          GatherTerms(s, x, b, g, i, j, [&](int64_t r) -> double& { return col(r, j); });
        }
        for (int64_t oo = 0; oo < og; ++oo) {
          const float* src = dy + ((b * s.out_channels + g * og + oo) * oh + i) * ow;
          for (int64_t j = 0; j < ow; ++j) rows(oo, j) = src[j];
        }
        dw.middleRows(g * og, og).noalias() += rows * col.transpose();
      }
    }
  }
  std::vector<double> out(dw.data(), dw.data() + dw.size());
  for (int64_t o = 0; o < s.bias_elements(); ++o) out.push_back(BiasGradAt(s, dy, o));
  return out;
}

double DgradAt(const Shape& s, const float* dy, const float* w, int64_t idx) {
  const int64_t v = idx % s.width, h = (idx / s.width) % s.height;
  const int64_t c = (idx / (s.width * s.height)) % s.in_channels;
  const int64_t b = idx / (s.width * s.height * s.in_channels);
  const int64_t cg = s.in_per_group(), og = s.out_per_group(), g = c / cg;
  const int64_t oh = s.out_h(), ow = s.out_w();
  double sum = ZeroTermsOf(s, w, c);
  for (int64_t oo = 0; oo < og; ++oo) {
    const int64_t o = g * og + oo;
    for (int64_t p = 0; p < s.kernel_h; ++p) {
      const int64_t ih = h + s.pad_top - p * s.dilation_h;  // = i * stride_h
      if (ih < 0 || ih % s.stride_h != 0 || ih / s.stride_h >= oh) continue;
      for (int64_t q = 0; q < s.kernel_w; ++q) {
        const int64_t jw = v + s.pad_left - q * s.dilation_w;
        if (jw < 0 || jw % s.stride_w != 0 || jw / s.stride_w >= ow) continue;
        sum += static_cast<double>(
                   dy[((b * s.out_channels + o) * oh + ih / s.stride_h) * ow + jw / s.stride_w]) *
               w[((o * cg + c - g * cg) * s.kernel_h + p) * s.kernel_w + q];
      }
    }
  }
  return sum;
}

double WgradAt(const Shape& s, const float* x, const float* dy, int64_t idx) {
  if (idx >= s.filter_elements()) return BiasGradAt(s, dy, idx - s.filter_elements());
  const int64_t q = idx % s.kernel_w, p = (idx / s.kernel_w) % s.kernel_h;
  const int64_t c = (idx / (s.kernel_w * s.kernel_h)) % s.in_per_group();
  const int64_t o = idx / (s.kernel_w * s.kernel_h * s.in_per_group());
  const int64_t ci = o / s.out_per_group() * s.in_per_group() + c;
  const int64_t oh = s.out_h(), ow = s.out_w();
  double sum = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* plane = x + (b * s.in_channels + ci) * s.height * s.width;
    const float* g = dy + (b * s.out_channels + o) * oh * ow;
    for (int64_t i = 0; i < oh; ++i) {
      const int64_t row = Tap(i, p, s.stride_h, s.pad_top, s.dilation_h);
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t col = Tap(j, q, s.stride_w, s.pad_left, s.dilation_w);
        // The padding is zeros that are multiplied (a non-finite dy there reaches dw), as the
        // forward's are.
        const bool inside = row >= 0 && row < s.height && col >= 0 && col < s.width;
        sum += static_cast<double>(g[i * ow + j]) * (inside ? plane[row * s.width + col] : 0.0);
      }
    }
  }
  return sum;
}

}  // namespace

Tensors HostInputs(const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& bias, const std::vector<float>& dy) {
  auto data = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  Tensors t;
  t.x = data(x), t.w = data(w), t.bias = data(bias), t.dy = data(dy);
  return t;
}

std::vector<double> Reference(const Shape& s, const Tensors& in) {
  switch (s.op) {
    case Op::kDgrad:
      return ReferenceDgrad(s, in.dy, in.w);
    case Op::kWgrad:
      return ReferenceWgrad(s, in.x, in.dy);
    case Op::kFprop:
      break;
  }
  return ReferenceConv(s, in.x, in.w, in.bias);
}

std::vector<double> ReferenceAt(const Shape& s, const Tensors& in,
                                const std::vector<int64_t>& positions) {
  if (s.op == Op::kFprop) return ReferenceConvAt(s, in.x, in.w, positions, in.bias);
  std::vector<double> out;
  out.reserve(positions.size());
  for (int64_t idx : positions) {
    out.push_back(s.op == Op::kDgrad ? DgradAt(s, in.dy, in.w, idx)
                                     : WgradAt(s, in.x, in.dy, idx));
  }
  return out;
}

}  // namespace conv2d
