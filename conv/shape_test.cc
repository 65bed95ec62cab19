// Shape's geometry against torch.nn.functional.conv2d's output sizes (computed by hand from its
// documented formula, out = floor((in + pad_a + pad_b - dilation * (k - 1) - 1) / stride) + 1),
// the derived counts, ToString's names, and ValidateShape's reason for each bad parameter.
#include "conv/shape.h"

#include <cstdint>
#include <string>

#include "conv/testing/shapes.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

Shape Make(int64_t b, int64_t cin, int64_t cout, int64_t h, int64_t w, int64_t kh, int64_t kw) {
  return Shape{b, cin, cout, h, w, kh, kw};
}

TEST(ShapeTest, DefaultsAreTheBasicForm) {
  const Shape s = Make(4, 64, 64, 128, 128, 8, 8);
  EXPECT_EQ(s.pad_top + s.pad_bottom + s.pad_left + s.pad_right, 0);
  EXPECT_EQ(s.stride_h, 1);
  EXPECT_EQ(s.stride_w, 1);
  EXPECT_EQ(s.dilation_h, 1);
  EXPECT_EQ(s.dilation_w, 1);
  EXPECT_EQ(s.groups, 1);
  EXPECT_FALSE(s.has_bias);
  EXPECT_TRUE(s.basic());
  EXPECT_EQ(s.out_h(), 121);
  EXPECT_EQ(s.out_w(), 121);
  EXPECT_EQ(s.span_h(), 8);
  EXPECT_TRUE(ValidateShape(s).ok());
}

struct Sizes {
  const char* what;
  Shape shape;
  int64_t out_h, out_w;  // by hand, F.conv2d's formula
};

// The padding, stride, dilation, groups and bias of `s` (conv/testing/shapes.h).
Shape With(Shape s, int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t sh, int64_t sw,
           int64_t dh, int64_t dw, int64_t g = 1, bool bias = false) {
  return WithGeometry(s, pt, pb, pl, pr, sh, sw, dh, dw, g, bias);
}

TEST(ShapeTest, OutputSizesAreFConv2ds) {
  const Sizes cases[] = {
      // ResNet's stem: 224, k 7, padding 3, stride 2 -> floor((224 + 6 - 6 - 1) / 2) + 1 = 112.
      {"resnet stem", With(Make(8, 3, 64, 224, 224, 7, 7), 3, 3, 3, 3, 2, 2, 1, 1), 112, 112},
      // 7, k 3, padding 1, stride 2 -> floor((7 + 2 - 2 - 1) / 2) + 1 = 4.
      {"pad 1 stride 2", With(Make(1, 1, 1, 7, 7, 3, 3), 1, 1, 1, 1, 2, 2, 1, 1), 4, 4},
      // 10, k 3, dilation 2 -> floor((10 - 4 - 1) / 1) + 1 = 6.
      {"dilation 2", With(Make(1, 1, 1, 10, 10, 3, 3), 0, 0, 0, 0, 1, 1, 2, 2), 6, 6},
      // 32, k 3, dilation 3, padding 3 ("same") -> floor(32 + 6 - 6 - 1) + 1 = 32.
      {"dilated same", With(Make(1, 2, 2, 32, 32, 3, 3), 3, 3, 3, 3, 1, 1, 3, 3), 32, 32},
      // Asymmetric: H 8, Kh 2, pad 0 + 1 -> floor(8 + 1 - 1 - 1) + 1 = 8;
      // W 9, Kw 4, pad 1 + 2, stride 2 -> floor((9 + 3 - 3 - 1) / 2) + 1 = 5.
      {"asymmetric", With(Make(1, 1, 1, 8, 9, 2, 4), 0, 1, 1, 2, 1, 2, 1, 1), 8, 5},
      // Stride larger than the kernel: 10, k 2, stride 4 -> floor((10 - 1 - 1) / 4) + 1 = 3.
      {"stride > kernel", With(Make(1, 1, 1, 10, 10, 2, 2), 0, 0, 0, 0, 4, 4, 1, 1), 3, 3},
      // Floor: 5, k 3, pad 0 + 1, stride 3 -> floor((5 + 1 - 2 - 1) / 3) + 1 = 2.
      {"floor", With(Make(1, 1, 1, 5, 5, 3, 3), 0, 1, 0, 1, 3, 3, 1, 1), 2, 2},
      // One output: 1x1 image, k 1, stride 3 -> 1; 5, k 3, dilation 2 (span 5) -> 1.
      {"1x1 stride 3", With(Make(1, 1, 1, 1, 1, 1, 1), 0, 0, 0, 0, 3, 3, 1, 1), 1, 1},
      {"span = image", With(Make(1, 1, 1, 5, 5, 3, 3), 0, 0, 0, 0, 1, 1, 2, 2), 1, 1},
      // K = 1 with dilation: the dilation changes nothing -> 17 x 15.
      {"k 1 dilated", With(Make(2, 4, 6, 17, 15, 1, 1), 0, 0, 0, 0, 1, 1, 2, 3), 17, 15},
      // Padding wider than the kernel: 4, k 2, pad 3 + 0 -> floor(4 + 3 - 1 - 1) + 1 = 6.
      {"pad > kernel", With(Make(1, 1, 1, 4, 4, 2, 2), 3, 0, 0, 0, 1, 1, 1, 1), 6, 3},
      // Different per axis: H 20, Kh 5, stride 3, dilation 2 -> floor((20 - 8 - 1) / 3) + 1 = 4;
      // W 11, Kw 2, pad 2 + 2, stride 1, dilation 3 -> floor(11 + 4 - 3 - 1) + 1 = 12.
      {"per axis", With(Make(1, 1, 1, 20, 11, 5, 2), 0, 0, 2, 2, 3, 1, 2, 3), 4, 12},
  };
  for (const Sizes& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_TRUE(ValidateShape(c.shape).ok()) << ValidateShape(c.shape);
    EXPECT_EQ(c.shape.out_h(), c.out_h);
    EXPECT_EQ(c.shape.out_w(), c.out_w);
    EXPECT_EQ(c.shape.output_elements(),
              c.shape.batch * c.shape.out_channels * c.out_h * c.out_w);
  }
}

TEST(ShapeTest, GroupsAndBiasCounts) {
  // F.conv2d: w is [Cout, Cin / groups, Kh, Kw], bias [Cout].
  Shape s = With(Make(2, 6, 10, 21, 18, 4, 3), 0, 0, 0, 0, 1, 1, 1, 1, 2, true);
  EXPECT_EQ(s.in_per_group(), 3);
  EXPECT_EQ(s.out_per_group(), 5);
  EXPECT_EQ(s.reduction(), 3 * 4 * 3);
  EXPECT_EQ(s.filter_elements(), 10 * 3 * 4 * 3);
  EXPECT_EQ(s.bias_elements(), 10);
  EXPECT_EQ(s.input_elements(), 2 * 6 * 21 * 18);
  EXPECT_DOUBLE_EQ(s.flops(), 2.0 * 2 * 10 * 18 * 16 * 36);
  EXPECT_DOUBLE_EQ(s.min_bytes(),
                   4.0 * (2 * 6 * 21 * 18 + 10 * 36 + 10 + 2 * 10 * 18 * 16));
  EXPECT_TRUE(s.grouped());
  EXPECT_FALSE(s.basic());
  s.has_bias = false;
  EXPECT_EQ(s.bias_elements(), 0);
  // Depthwise: groups = Cin, one input channel per group.
  const Shape d = With(Make(1, 8, 16, 9, 9, 3, 3), 1, 1, 1, 1, 1, 1, 1, 1, 8);
  EXPECT_EQ(d.in_per_group(), 1);
  EXPECT_EQ(d.out_per_group(), 2);
  EXPECT_EQ(d.filter_elements(), 16 * 9);
  // A bias alone keeps the shape basic (Plan::Run adds it to any algorithm's result).
  Shape b = Make(1, 2, 3, 8, 8, 3, 3);
  b.has_bias = true;
  EXPECT_TRUE(b.basic());
  EXPECT_FALSE(b.padded() || b.strided() || b.dilated() || b.grouped());
}

// The terms each written element sums (the contract's count): dgrad's are the taps that reach
// one dx pixel times the group's output channels, at most ceil(K / (s / gcd(s, d))) a side; a
// dilation sharing a factor with the stride lets every tap of an axis reach some pixels.
TEST(ShapeTest, TermsPerWrittenElement) {
  Shape d = With(Make(2, 4, 8, 20, 20, 3, 3), 1, 1, 1, 1, 2, 2, 1, 1, 1);
  EXPECT_EQ(d.terms(), d.reduction());  // the forward
  d.op = Op::kDgrad;
  EXPECT_EQ(d.terms(), 8 * 2 * 2);      // stride 2: 2 of 3 taps a side
  d.dilation_h = d.dilation_w = 2;      // gcd 2: all 3 taps reach the even pixels
  EXPECT_EQ(d.terms(), 8 * 3 * 3);
  d.stride_h = 3;                        // gcd(3, 2) = 1: one tap in three reaches a row
  EXPECT_EQ(d.terms(), 8 * 1 * 3);
  d.op = Op::kWgrad;
  EXPECT_EQ(d.terms(), d.batch * d.out_h() * d.out_w());
}

TEST(ShapeTest, ToStringNamesEachPartOffItsDefault) {
  const Shape base = Make(4, 64, 32, 128, 96, 8, 5);
  EXPECT_EQ(base.ToString(), "b4_c64x32_h128w96_k8x5");
  EXPECT_EQ(Shape::KernelBot(128, 8, 64, 4).ToString(), "b4_c64x64_h128w128_k8x8");
  EXPECT_EQ(With(base, 1, 2, 3, 4, 1, 1, 1, 1).ToString(), "b4_c64x32_h128w96_k8x5_p1,2,3,4");
  EXPECT_EQ(With(base, 0, 0, 0, 1, 1, 1, 1, 1).ToString(), "b4_c64x32_h128w96_k8x5_p0,0,0,1");
  EXPECT_EQ(With(base, 0, 0, 0, 0, 2, 3, 1, 1).ToString(), "b4_c64x32_h128w96_k8x5_s2x3");
  EXPECT_EQ(With(base, 0, 0, 0, 0, 1, 2, 1, 1).ToString(), "b4_c64x32_h128w96_k8x5_s1x2");
  EXPECT_EQ(With(base, 0, 0, 0, 0, 1, 1, 2, 1).ToString(), "b4_c64x32_h128w96_k8x5_d2x1");
  EXPECT_EQ(With(base, 0, 0, 0, 0, 1, 1, 1, 1, 16).ToString(), "b4_c64x32_h128w96_k8x5_g16");
  EXPECT_EQ(With(base, 0, 0, 0, 0, 1, 1, 1, 1, 1, true).ToString(),
            "b4_c64x32_h128w96_k8x5_bias");
  EXPECT_EQ(With(base, 3, 0, 1, 2, 2, 1, 1, 3, 4, true).ToString(),
            "b4_c64x32_h128w96_k8x5_p3,0,1,2_s2x1_d1x3_g4_bias");
  // Distinct geometries get distinct names.
  EXPECT_NE(With(base, 1, 0, 0, 0, 1, 1, 1, 1).ToString(),
            With(base, 0, 1, 0, 0, 1, 1, 1, 1).ToString());
}

TEST(ShapeTest, EqualityCoversTheGeometry) {
  const Shape a = Make(1, 4, 4, 9, 9, 3, 3);
  EXPECT_EQ(a, a);
  EXPECT_FALSE(a == With(a, 0, 0, 0, 1, 1, 1, 1, 1));
  EXPECT_FALSE(a == With(a, 0, 0, 0, 0, 1, 2, 1, 1));
  EXPECT_FALSE(a == With(a, 0, 0, 0, 0, 1, 1, 2, 1));
  EXPECT_FALSE(a == With(a, 0, 0, 0, 0, 1, 1, 1, 1, 2));
  EXPECT_FALSE(a == With(a, 0, 0, 0, 0, 1, 1, 1, 1, 1, true));
}

struct Bad {
  const char* what;
  Shape shape;
  const char* reason;
};

TEST(ShapeTest, ValidateShapeGivesEachBadParametersReason) {
  const Shape ok = Make(2, 6, 4, 12, 10, 3, 3);
  ASSERT_TRUE(ValidateShape(ok).ok());
  auto set = [&](auto f) {
    Shape s = ok;
    f(s);
    return s;
  };
  const Bad bad[] = {
      {"batch 0", set([](Shape& s) { s.batch = 0; }), "batch must be positive, got 0"},
      {"in_channels -1", set([](Shape& s) { s.in_channels = -1; }),
       "in_channels must be positive, got -1"},
      {"out_channels 0", set([](Shape& s) { s.out_channels = 0; }), "out_channels must be positive"},
      {"height 0", set([](Shape& s) { s.height = 0; }), "height must be positive"},
      {"width 0", set([](Shape& s) { s.width = 0; }), "width must be positive"},
      {"kernel_h 0", set([](Shape& s) { s.kernel_h = 0; }), "kernel_h must be positive"},
      {"kernel_w -4", set([](Shape& s) { s.kernel_w = -4; }), "kernel_w must be positive"},
      {"stride_h 0", set([](Shape& s) { s.stride_h = 0; }), "stride_h must be positive, got 0"},
      {"stride_w -1", set([](Shape& s) { s.stride_w = -1; }), "stride_w must be positive"},
      {"dilation_h 0", set([](Shape& s) { s.dilation_h = 0; }), "dilation_h must be positive"},
      {"dilation_w 0", set([](Shape& s) { s.dilation_w = 0; }), "dilation_w must be positive"},
      {"groups 0", set([](Shape& s) { s.groups = 0; }), "groups must be positive"},
      {"pad_top -1", set([](Shape& s) { s.pad_top = -1; }), "pad_top must be >= 0, got -1"},
      {"pad_bottom -2", set([](Shape& s) { s.pad_bottom = -2; }), "pad_bottom must be >= 0"},
      {"pad_left -1", set([](Shape& s) { s.pad_left = -1; }), "pad_left must be >= 0"},
      {"pad_right -1", set([](Shape& s) { s.pad_right = -1; }), "pad_right must be >= 0"},
      {"groups 4 does not divide Cin 6", set([](Shape& s) { s.groups = 4; }),
       "groups = 4 must divide in_channels (6) and out_channels (4)"},
      {"groups 3 does not divide Cout 4", set([](Shape& s) { s.groups = 3; }),
       "groups = 3 must divide"},
      {"kernel larger than the image", set([](Shape& s) { s.kernel_h = 13; }),
       "the kernel 13x3 is larger than the image 12x10"},
      {"kernel larger than the padded image",
       set([](Shape& s) {
         s.kernel_w = 13;
         s.pad_left = 2;
       }),
       "the kernel 3x13 is larger than the padded image 12x12"},
      {"dilated kernel larger than the image", set([](Shape& s) { s.dilation_w = 5; }),
       "the kernel 3x3 dilated to 3x11 is larger than the image 12x10"},
      {"dilated kernel larger than the padded image",
       set([](Shape& s) {
         s.dilation_h = 7;  // span 15 on 12 + 1 + 1
         s.pad_top = s.pad_bottom = 1;
       }),
       "dilated to 15x3 is larger than the padded image 14x10"},
      {"stride beyond 2^24", set([](Shape& s) { s.stride_h = int64_t{1} << 25; }),
       "stride_h = 33554432 is beyond 2^24"},
      {"padding beyond 2^24", set([](Shape& s) { s.pad_bottom = int64_t{1} << 25; }),
       "pad_bottom = 33554432 is beyond 2^24"},
      {"dilation beyond 2^24", set([](Shape& s) { s.dilation_w = int64_t{1} << 25; }),
       "dilation_w = 33554432 is beyond 2^24"},
      {"batch beyond 2^40", set([](Shape& s) { s.batch = int64_t{1} << 41; }),
       "batch = 2199023255552 is beyond 2^40"},
      {"input beyond 2^40 elements",
       set([](Shape& s) {
         s.batch = 1 << 20;
         s.in_channels = 1 << 20;
         s.groups = 1;
         s.out_channels = 1;
       }),
       "has a tensor of more than 2^40 elements"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    const absl::Status st = ValidateShape(b.shape);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(b.reason), absl::string_view::npos)
        << "expected \"" << b.reason << "\" in: " << st.message();
  }
}

TEST(ShapeTest, BoundariesAreAccepted) {
  // The dilated kernel exactly the padded image: one output.
  Shape s = Make(1, 3, 3, 10, 6, 3, 2);
  s.dilation_h = 5;  // span 11 = 10 + 1
  s.pad_top = 1;
  s.dilation_w = 7;  // span 8 = 6 + 2
  s.pad_right = 2;
  EXPECT_TRUE(ValidateShape(s).ok()) << ValidateShape(s);
  EXPECT_EQ(s.out_h(), 1);
  EXPECT_EQ(s.out_w(), 1);
  // Depthwise and groups = 1 with any channels; groups = gcd.
  Shape g = Make(1, 12, 18, 5, 5, 1, 1);
  for (int64_t groups : {1, 2, 3, 6}) {
    g.groups = groups;
    EXPECT_TRUE(ValidateShape(g).ok()) << groups;
  }
  g.groups = 12;  // divides Cin, not Cout
  EXPECT_FALSE(ValidateShape(g).ok());
  // Padding larger than the kernel is allowed, as in F.conv2d.
  Shape p = Make(1, 1, 1, 4, 4, 2, 2);
  p.pad_top = 3;
  EXPECT_TRUE(ValidateShape(p).ok());
  // The largest geometry accepted.
  Shape big = Make(1, 1, 1, 1, 1, 1, 1);
  big.stride_h = big.dilation_w = big.pad_left = int64_t{1} << 24;
  EXPECT_TRUE(ValidateShape(big).ok()) << ValidateShape(big);
}

TEST(ShapeTest, CheckFitsInt32) {
  EXPECT_TRUE(CheckFitsInt32(Make(1, 1, 1, 8, 8, 3, 3), "k").ok());
  const absl::Status st = CheckFitsInt32(Make(1 << 12, 1 << 10, 1, 1 << 5, 1 << 5, 1, 1), "kern");
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("kern"), absl::string_view::npos);
}

}  // namespace
}  // namespace conv2d
