#include "conv/shape.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace conv2d {

std::string Shape::ToString() const {
  return absl::StrCat("b", batch, "_c", in_channels, "x", out_channels, "_h", height, "w", width,
                      "_k", kernel_h, "x", kernel_w);
}

Shape Shape::KernelBot(int64_t size, int64_t kernel, int64_t channels, int64_t batch) {
  return Shape{batch, channels, channels, size, size, kernel, kernel};
}

namespace {
// Largest element count accepted at all: 2^40 floats is 4 TiB, beyond any GPU, and keeps every
// product of sizes below far from int64 overflow.
constexpr int64_t kMaxElements = int64_t{1} << 40;

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
  auto positive = [](const char* what, int64_t v) -> absl::Status {
    if (v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " must be positive, got ", v));
    }
    return absl::OkStatus();
  };
  for (auto [what, v] : {std::pair{"batch", s.batch}, {"in_channels", s.in_channels},
                         {"out_channels", s.out_channels}, {"height", s.height},
                         {"width", s.width}, {"kernel_h", s.kernel_h}, {"kernel_w", s.kernel_w}}) {
    absl::Status st = positive(what, v);
    if (!st.ok()) return st;
  }
  if (s.kernel_h > s.height || s.kernel_w > s.width) {
    return absl::InvalidArgumentError(absl::StrCat("kernel ", s.kernel_h, "x", s.kernel_w,
                                                   " is larger than the image ", s.height, "x",
                                                   s.width));
  }
  if (!ProductBelow({s.batch, s.in_channels, s.height, s.width}, kMaxElements) ||
      !ProductBelow({s.out_channels, s.in_channels, s.kernel_h, s.kernel_w}, kMaxElements) ||
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
