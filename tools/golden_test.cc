// The golden format's geometry line: written only off the basic form (so that the basic files stay
// byte for byte as they were), read back into the Shape, refused when malformed; the bias drawn
// from kBiasTensor.
#include "tools/golden.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "reference/random.h"

namespace conv2d {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string Header(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return text.substr(0, text.find("data\n"));
}

Golden Make(const Shape& s) {
  Golden g;
  g.shape = s;
  g.seed = 7;
  g.values.assign(s.output_elements(), 0.5);
  return g;
}

TEST(GoldenTest, BasicShapesHaveNoGeometryLine) {
  const Golden g = Make(Shape{1, 2, 3, 6, 5, 3, 2});
  const std::string path = TempPath("basic.golden");
  ASSERT_TRUE(WriteGolden(g, path).ok());
  EXPECT_EQ(Header(path),
            "conv2d-golden 1\nshape 1 2 3 6 5 3 2\nseed 7\ninputs uniform\n"
            "tolerance 0.001 0.001\npositions all\nvalues f32\n");
  absl::StatusOr<Golden> r = ReadGolden(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape, g.shape);
  EXPECT_TRUE(GoldenInputs(*r).bias.empty());
  EXPECT_EQ(GoldenInputs(*r).bias_or_null(), nullptr);
}

TEST(GoldenTest, GeometryRoundTrips) {
  Shape s{2, 6, 4, 11, 9, 3, 2};
  s.pad_top = 1;
  s.pad_bottom = 0;
  s.pad_left = 2;
  s.pad_right = 3;
  s.stride_h = 2;
  s.stride_w = 3;
  s.dilation_h = 2;
  s.dilation_w = 1;
  s.groups = 2;
  s.has_bias = true;
  const Golden g = Make(s);
  const std::string path = TempPath("geometry.golden");
  ASSERT_TRUE(WriteGolden(g, path).ok());
  EXPECT_NE(Header(path).find("\ngeometry 1 0 2 3 2 3 2 1 2 1\n"), std::string::npos)
      << Header(path);
  absl::StatusOr<Golden> r = ReadGolden(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape, s);
  EXPECT_EQ(r->values.size(), static_cast<size_t>(s.output_elements()));
  EXPECT_EQ(GoldenFileName(*r), s.ToString() + "_s7.golden");
  // The bias is tensor kBiasTensor of the seed; x and w as before.
  const GoldenTensors t = GoldenInputs(*r);
  EXPECT_EQ(t.bias, RandomTensor(7, kBiasTensor, 4));
  EXPECT_EQ(t.x, RandomTensor(7, kInputTensor, s.input_elements()));
  EXPECT_EQ(t.w, RandomTensor(7, kFilterTensor, s.filter_elements()));
  ASSERT_NE(t.bias_or_null(), nullptr);

  // A bias alone is written (it is not the default) though the shape is basic.
  Shape b{1, 1, 2, 4, 4, 3, 3};
  b.has_bias = true;
  ASSERT_TRUE(WriteGolden(Make(b), path).ok());
  EXPECT_NE(Header(path).find("\ngeometry 0 0 0 0 1 1 1 1 1 1\n"), std::string::npos);
  r = ReadGolden(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape, b);
}

void WriteText(const std::string& path, const std::string& header, size_t values) {
  std::ofstream f(path, std::ios::binary);
  f << header << "data\n";
  const std::vector<float> v(values, 1.0f);
  f.write(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(GoldenTest, MalformedGeometryIsRefused) {
  const std::string path = TempPath("bad.golden");
  const std::string head = "conv2d-golden 1\nshape 1 1 1 4 4 3 3\nseed 1\n";
  const std::string tail = "tolerance 0.001 0.001\npositions all\nvalues f32\n";
  struct Case {
    const char* line;
    const char* says;
    size_t values;
  };
  const Case cases[] = {
      {"geometry 0 0 0 0 1 1 1 1 1\n", "geometry must be", 4},        // a field missing
      {"geometry 0 0 0 0 1 1 1 1 1 2\n", "geometry must be", 4},      // bias not 0 or 1
      {"geometry 0 0 0 0 1 x 1 1 1 0\n", "geometry must be", 4},      // not a number
      {"geometry 0 0 0 0 0 1 1 1 1 0\n", "stride_h must be positive", 4},
      {"geometry -1 0 0 0 1 1 1 1 1 0\n", "pad_top must be >= 0", 4},
      {"geometry 0 0 0 0 1 1 2 1 1 0\n", "larger than the image", 4},  // span 5 on 4
      {"geometry 0 0 0 0 1 1 1 1 1 0\ngeometry 0 0 0 0 1 1 1 1 1 0\n", "two geometry lines", 4},
      // Values of the wrong count for the geometry: 4x4 padded by 1 has 4x4 outputs.
      {"geometry 1 1 1 1 1 1 1 1 1 0\n", "truncated", 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    WriteText(path, head + c.line + tail, c.values);
    absl::StatusOr<Golden> r = ReadGolden(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find(c.says), absl::string_view::npos) << r.status();
  }
  // And the well-formed one of these reads.
  WriteText(path, head + "geometry 1 1 1 1 1 1 1 1 1 0\n" + tail, 16);
  absl::StatusOr<Golden> r = ReadGolden(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape.out_h(), 4);
}

}  // namespace
}  // namespace conv2d
