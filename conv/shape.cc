#include "conv/shape.h"

#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace conv2d {

std::string Shape::ToString() const {
  std::string s = absl::StrCat("b", batch, "_c", in_channels, "x", out_channels, "_h", height, "w",
                               width, "_k", kernel_h, "x", kernel_w);
  if (padded()) absl::StrAppend(&s, "_p", pad_top, ",", pad_bottom, ",", pad_left, ",", pad_right);
  if (strided()) absl::StrAppend(&s, "_s", stride_h, "x", stride_w);
  if (dilated()) absl::StrAppend(&s, "_d", dilation_h, "x", dilation_w);
  if (grouped()) absl::StrAppend(&s, "_g", groups);
  if (has_bias) absl::StrAppend(&s, "_bias");
  if (op != Op::kFprop) absl::StrAppend(&s, "_", OpName(op));
  return s;
}

const char* OpName(Op op) {
  switch (op) {
    case Op::kFprop:
      return "fprop";
    case Op::kDgrad:
      return "dgrad";
    case Op::kWgrad:
      return "wgrad";
  }
  return "unknown";
}

int64_t Shape::terms() const {
  switch (op) {
    case Op::kDgrad: {
      // The taps of one axis that reach a dx pixel repeat every s / gcd(s, d) taps
      // (transposed_dgrad.h's FoldAxis): ceil(K / that) of them at most.
      const int64_t step_h = stride_h / std::gcd(stride_h, dilation_h);
      const int64_t step_w = stride_w / std::gcd(stride_w, dilation_w);
      return out_per_group() * ((kernel_h + step_h - 1) / step_h) *
             ((kernel_w + step_w - 1) / step_w);
    }
    case Op::kWgrad:
      return batch * out_h() * out_w();
    case Op::kFprop:
      break;
  }
  return reduction();
}

Tensors BindRoles(const Shape& s, float* x, float* w, float* bias, float* y) {
  Tensors t;
  if (!s.has_bias) bias = nullptr;
  switch (s.op) {
    case Op::kFprop:
      t.x = x, t.w = w, t.bias = bias, t.y = y;
      break;
    case Op::kDgrad:
      t.dy = y, t.w = w, t.dx = x;
      break;
    case Op::kWgrad:
      t.x = x, t.dy = y, t.dw = w, t.db = bias;
      break;
  }
  return t;
}

int64_t Shape::written_elements() const {
  switch (op) {
    case Op::kDgrad:
      return input_elements();
    case Op::kWgrad:
      return filter_elements() + bias_elements();
    case Op::kFprop:
      break;
  }
  return output_elements();
}

Shape Shape::KernelBot(int64_t size, int64_t kernel, int64_t channels, int64_t batch) {
  return Shape{batch, channels, channels, size, size, kernel, kernel};
}

namespace {
// Largest element count accepted at all: 2^40 floats is 4 TiB, beyond any GPU, and keeps every
// product of sizes below far from int64 overflow.
constexpr int64_t kMaxElements = int64_t{1} << 40;
// Largest padding, stride and dilation: far beyond any network's, and small enough that the
// geometry's products (dilation * kernel, size + padding) stay far from int64 overflow.
constexpr int64_t kMaxGeometry = int64_t{1} << 24;

bool ProductBelow(std::initializer_list<int64_t> factors, int64_t limit) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f > limit / p) return false;
    p *= f;
  }
  return p <= limit;
}
}  // namespace

absl::Status ValidateShape(const Shape& s) {
  if (s.op != Op::kFprop && s.op != Op::kDgrad && s.op != Op::kWgrad) {
    return absl::InvalidArgumentError(absl::StrCat("unknown operation ", static_cast<int>(s.op),
                                                   " (fprop 0, dgrad 1, wgrad 2)"));
  }
  if (s.op == Op::kDgrad && s.has_bias) {
    return absl::InvalidArgumentError(
        "a dgrad problem has no bias: the bias gradient db is computed by wgrad (has_bias on a "
        "wgrad problem)");
  }
  for (auto [what, v] : {std::pair{"batch", s.batch}, {"in_channels", s.in_channels},
                         {"out_channels", s.out_channels}, {"height", s.height},
                         {"width", s.width}, {"kernel_h", s.kernel_h}, {"kernel_w", s.kernel_w},
                         {"stride_h", s.stride_h}, {"stride_w", s.stride_w},
                         {"dilation_h", s.dilation_h}, {"dilation_w", s.dilation_w},
                         {"groups", s.groups}}) {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(what, " must be positive, got ", v));
    if (v > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(what, " = ", v, " is beyond 2^40"));
    }
  }
  for (auto [what, v] : {std::pair{"pad_top", s.pad_top}, {"pad_bottom", s.pad_bottom},
                         {"pad_left", s.pad_left}, {"pad_right", s.pad_right}}) {
    if (v < 0) return absl::InvalidArgumentError(absl::StrCat(what, " must be >= 0, got ", v));
  }
  for (auto [what, v] : {std::pair{"pad_top", s.pad_top}, {"pad_bottom", s.pad_bottom},
                         {"pad_left", s.pad_left}, {"pad_right", s.pad_right},
                         {"stride_h", s.stride_h}, {"stride_w", s.stride_w},
                         {"dilation_h", s.dilation_h}, {"dilation_w", s.dilation_w},
                         {"kernel_h", s.kernel_h}, {"kernel_w", s.kernel_w}}) {
    if (v > kMaxGeometry) {
      return absl::InvalidArgumentError(absl::StrCat(what, " = ", v, " is beyond 2^24"));
    }
  }
  if (s.in_channels % s.groups != 0 || s.out_channels % s.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("groups = ", s.groups,
                                                   " must divide in_channels (", s.in_channels,
                                                   ") and out_channels (", s.out_channels, ")"));
  }
  const int64_t padded_h = s.height + s.pad_top + s.pad_bottom;
  const int64_t padded_w = s.width + s.pad_left + s.pad_right;
  if (s.span_h() > padded_h || s.span_w() > padded_w) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the kernel ", s.kernel_h, "x", s.kernel_w,
        s.dilated() ? absl::StrCat(" dilated to ", s.span_h(), "x", s.span_w()) : "",
        " is larger than the ", s.padded() ? "padded " : "", "image ", padded_h, "x", padded_w,
        ": the output would be empty"));
  }
  if (!ProductBelow({s.batch, s.in_channels, s.height, s.width}, kMaxElements) ||
      !ProductBelow({s.out_channels, s.in_per_group(), s.kernel_h, s.kernel_w}, kMaxElements) ||
      !ProductBelow({s.batch, s.out_channels, s.out_h(), s.out_w()}, kMaxElements)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", s.ToString(), " has a tensor of more than 2^40 elements"));
  }
  return absl::OkStatus();
}

absl::Status CheckFitsInt32(const Shape& s, const char* who) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (s.input_elements() > kMax || s.filter_elements() > kMax || s.output_elements() > kMax) {
    return absl::OutOfRangeError(absl::StrCat(
        who, " indexes with 32-bit integers; shape ", s.ToString(), " has ",
        s.input_elements(), " input, ", s.filter_elements(), " filter and ",
        s.output_elements(), " output elements (limit ", kMax, ")"));
  }
  return absl::OkStatus();
}

}  // namespace conv2d
