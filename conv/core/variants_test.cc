// Every registered variant (the library's and the lab's), on the standard shapes, the KernelBot
// test shapes and one grouped shape it takes, two fresh seeds each, against the fp64 reference
// with a poisoned output. Needs a GPU; fails without one. Which variant may refuse which shape is
// itself checked (RefusalsAreDeclared), and so is that a NaN in x or w reaches every output it
// touches (NanReachesTheOutput).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "conv/conv.h"
#include "conv/core/registry.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "tools/lab/lab.h"

namespace conv2d {
namespace {

struct Case {
  std::string algorithm;
  Shape shape;
};

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes = EdgeShapes();
  for (const Shape& s : KernelBotTestShapes()) shapes.push_back(s);
  // Two groups of odd width (3 in, 5 out): grouped_direct takes no shape of one group, and
  // RefusalsAreDeclared wants every variant to take one.
  shapes.push_back(WithGeometry({2, 6, 10, 21, 18, 4, 3}, 0, 0, 0, 0, 1, 1, 1, 1, 2));
  return shapes;
}

// The registry's names, the lab's registered once.
const std::vector<std::string>& Names() {
  static const std::vector<std::string>* names = [] {
    const absl::Status lab = RegisterLabAlgorithms();
    if (!lab.ok()) std::printf("registering the lab failed: %s\n", lab.ToString().c_str());
    return new std::vector<std::string>(Algorithms());
  }();
  return *names;
}

bool Takes(const std::string& algorithm, const Shape& s) {
  return Registry::Global().Find(algorithm)->CanImplement(s).ok();
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const std::string& a : Names()) {
    for (const Shape& s : Shapes()) {
      if (Takes(a, s)) cases.push_back({a, s});
    }
  }
  return cases;
}

// What the registry says each variant can do is what is tested: a refusal is one of the codes
// that mean "not this shape" (never an error of the call), names the variant, and no variant
// refuses every shape here (one that did would be tested on nothing).
TEST(Variants, RefusalsAreDeclared) {
  int refused = 0;
  for (const std::string& a : Names()) {
    int taken = 0;
    for (const Shape& s : Shapes()) {
      const absl::Status st = Registry::Global().Find(a)->CanImplement(s);
      if (st.ok()) {
        ++taken;
        continue;
      }
      ++refused;
      const absl::StatusCode c = st.code();
      EXPECT_TRUE(c == absl::StatusCode::kUnimplemented || c == absl::StatusCode::kOutOfRange ||
                  c == absl::StatusCode::kResourceExhausted)
          << a << " refuses " << s.ToString() << ": " << st;
      EXPECT_NE(st.message().find(a.substr(0, a.find('_'))), absl::string_view::npos)
          << a << "'s refusal does not name it: " << st;
    }
    EXPECT_GT(taken, 0) << a << " takes none of the standard shapes";
  }
  std::printf("%d (variant, shape) pairs refused, each with a declared code\n", refused);
}

// A NaN in x or w must come out as NaN in every output that uses it, never as a finite number
// (round 80: the 3xTF32 split once rounded the GPU's NaN to a zero). Variants may spread it to
// more outputs than that (the FFTs pack two transforms in one and mix whole tiles): not checked.
TEST(Variants, NanReachesTheOutput) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "needs a GPU";
  ASSERT_GT(devices, 0) << "needs a GPU";
  const Shape s{2, 5, 6, 20, 18, 3, 3};  // every variant takes it
  const int64_t nx = s.input_elements(), nw = s.filter_elements(), ny = s.output_elements();
  const int64_t oh = s.out_h(), ow = s.out_w();
  std::vector<float> hx(nx), hw(nw), hy(ny);
  for (int64_t i = 0; i < nx; ++i) hx[i] = static_cast<float>((i * 37) % 17) / 17.0f - 0.5f;
  for (int64_t i = 0; i < nw; ++i) hw[i] = static_cast<float>((i * 11) % 13) / 13.0f - 0.5f;
  float *x, *w, *y;
  ASSERT_EQ(cudaMalloc(&x, nx * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w, nw * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, ny * 4), cudaSuccess);
  // The NaN in x at (b 1, c 2, row 9, col 7); the one in w at (o 3, c 1, 1, 2).
  const int64_t xi = ((1 * s.in_channels + 2) * s.height + 9) * s.width + 7;
  const int64_t wi = ((3 * s.in_channels + 1) * s.kernel_h + 1) * s.kernel_w + 2;
  for (const std::string& a : Names()) {
    SCOPED_TRACE(a);
    const absl::Status can = Registry::Global().Find(a)->CanImplement(s);
    if (!can.ok()) {  // a family of other shapes (depthwise): RefusalsAreDeclared checks it
      std::printf("%s does not take %s: %s\n", a.c_str(), s.ToString().c_str(),
                  std::string(can.message()).c_str());
      continue;
    }
    absl::StatusOr<Plan> plan = Plan::Create(s, a);
    ASSERT_TRUE(plan.ok()) << plan.status();
    void* ws = nullptr;
    if (plan->workspace_bytes() > 0) {
      ASSERT_EQ(cudaMalloc(&ws, plan->workspace_bytes()), cudaSuccess);
    }
    for (bool in_filter : {false, true}) {
      std::vector<float> px = hx, pw = hw;
      (in_filter ? pw[wi] : px[xi]) = std::nanf("");
      ASSERT_EQ(cudaMemcpy(x, px.data(), nx * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(w, pw.data(), nw * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(y, 0, ny * 4), cudaSuccess);
      ASSERT_TRUE(plan->Run(x, w, y, ws, plan->workspace_bytes(), nullptr).ok());
      ASSERT_EQ(cudaMemcpy(hy.data(), y, ny * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      int64_t touched = 0, finite = 0;
      for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t o = 0; o < s.out_channels; ++o) {
          for (int64_t i = 0; i < oh; ++i) {
            for (int64_t j = 0; j < ow; ++j) {
              const bool uses = in_filter ? o == 3 : (b == 1 && i <= 9 && 9 < i + s.kernel_h &&
                                                      j <= 7 && 7 < j + s.kernel_w);
              if (!uses) continue;
              ++touched;
              finite += std::isfinite(hy[((b * s.out_channels + o) * oh + i) * ow + j]);
            }
          }
        }
      }
      EXPECT_GT(touched, 0);
      EXPECT_EQ(finite, 0) << finite << " of the " << touched << " outputs that use the NaN in "
                           << (in_filter ? "w" : "x") << " are finite";
    }
    cudaFree(ws);
  }
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
}

class VariantsTest : public ::testing::TestWithParam<Case> {};

TEST_P(VariantsTest, MatchesFp64Reference) {
  const Case& c = GetParam();
  for (uint64_t seed : {uint64_t{11}, uint64_t{12345}}) {
    absl::StatusOr<Comparison> r = CheckAgainstReference(c.shape, c.algorithm, seed, 1 << 16);
    ASSERT_TRUE(r.ok()) << r.status();
    std::printf("%-14s %-34s seed %-6llu %s\n", c.algorithm.c_str(), c.shape.ToString().c_str(),
                static_cast<unsigned long long>(seed), r->ToString().c_str());
    EXPECT_TRUE(r->ok()) << r->ToString() << " first failure at " << r->first_failure;
  }
}

INSTANTIATE_TEST_SUITE_P(All, VariantsTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) {
                           return info.param.algorithm + "_" + GtestName(info.param.shape);
                         });

}  // namespace
}  // namespace conv2d
