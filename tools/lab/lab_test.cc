// The lab is measurement only: registering it changes none of auto's choices, over the standard
// shape lists, the geometry lists, a grid of depthwise layers and a grid of batch, channels, image
// and kernel sizes. If a lab algorithm ever
// became auto's choice for some shape, it would belong in the library, and this fails.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma.h"
#include "conv/conv.h"
#include "conv/core/transposed_dgrad.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "tools/lab/lab.h"

namespace conv2d {
namespace {

std::vector<Shape> Sweep() {
  std::vector<Shape> shapes;
  for (const auto& list : {KernelBotTestShapes(), KernelBotBenchmarkShapes(), CnnShapes(),
                           EdgeShapes()}) {
    shapes.insert(shapes.end(), list.begin(), list.end());
  }
  for (const auto& list : {GeometryShapes(), NetworkGeometryShapes()}) {
    shapes.insert(shapes.end(), list.begin(), list.end());
  }
  // Depthwise layers on both sides of depthwise's staged/streaming rule, where the forced
  // variants (depthwise_staged, depthwise_streaming) take every shape "depthwise" takes.
  for (int64_t h : {7, 14, 15, 28, 56, 112}) {
    for (int64_t k : {3, 5, 7, 9, 31}) {
      for (int64_t stride : {1, 2}) {
        shapes.push_back(WithGeometry(Shape{32, 96, 96, h, h, k, k}, k / 2, k / 2, k / 2, k / 2,
                                      stride, stride, 1, 1, /*groups=*/96));
      }
    }
  }
  for (int64_t b : {1, 4, 32}) {
    for (int64_t c : {3, 16, 64, 256}) {
      for (int64_t h : {7, 33, 64, 128, 256}) {
        for (int64_t k : {1, 3, 5, 8, 16, 32}) {
          if (k <= h) shapes.push_back(Shape{b, c, c, h, h, k, k});
        }
      }
    }
  }
  return shapes;
}

// auto's pick, or, where nothing takes the shape, the error's code: its message lists every
// registered algorithm's reason, the lab's too. (Every shape of the sweep is taken since
// grouped_direct serves the geometry list's two grouped shapes of several channels per group.)
std::string Pick(const Shape& s) {
  absl::StatusOr<std::string> pick = ChooseAlgorithm(s);
  return pick.ok() ? *pick : absl::StatusCodeToString(pick.status().code());
}

TEST(Lab, AutoChoosesTheSameWithTheLabRegistered) {
  const std::vector<Shape> shapes = Sweep();
  std::vector<std::string> before;
  for (const Shape& s : shapes) before.push_back(Pick(s));
  ASSERT_TRUE(RegisterLabAlgorithms().ok());
  for (const AlgorithmFactory make : LabAlgorithms()) {
    const std::string name = make()->name();
    const std::vector<std::string> all = Algorithms();
    EXPECT_NE(std::find(all.begin(), all.end(), name), all.end()) << name << " not registered";
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(Pick(shapes[i]), before[i]) << shapes[i].ToString();
  }
  EXPECT_EQ(RegisterLabAlgorithms().code(), absl::StatusCode::kAlreadyExists);
}

// The forced dgrad forms propose the form they name: the fold on ConvNeXt's 2x2/2 dgrads, where
// the rule takes the phases, and the phases on ResNet's stem, where it takes the fold.
TEST(Lab, ForcedDgradFormsProposeTheirForm) {
  auto dgrad = [](Shape s, int64_t pad, int64_t stride) {
    s = WithGeometry(s, pad, pad, pad, pad, stride, stride);
    s.op = Op::kDgrad;
    return s;
  };
  auto form = [](const Algorithm& a, const Shape& s) -> std::string {
    absl::StatusOr<Proposal> p = a.Propose(s, DeviceInfo::ModelDevice());
    if (!p.ok()) return p.status().ToString();
    const TransposedDgradProposal* t = ConfigOf<TransposedDgradProposal>(*p);
    if (t == nullptr) return "not transposed";
    return t->phases.size() == 1 && t->phases[0].fold ? "fold" : "phases";
  };
  const std::unique_ptr<Algorithm> fold = MakeImplicitGemmWgmmaDgradForced(/*fold=*/true);
  const std::unique_ptr<Algorithm> phases = MakeImplicitGemmWgmmaDgradForced(/*fold=*/false);
  const std::unique_ptr<Algorithm> rule = MakeImplicitGemmWgmma();
  // The rule's (plan_test's DispatchTest.TheStemsDgradIsAFold): the fold where the taps do not
  // overlap, or where they do and one phase would not fill the SMs.
  for (const auto& [s, by_rule] :
       {std::pair{dgrad(Shape{32, 128, 128, 56, 56, 3, 3}, 1, 2), "phases"},
        std::pair{dgrad(Shape{32, 512, 512, 14, 14, 3, 3}, 1, 2), "fold"},
        std::pair{dgrad(Shape{32, 96, 192, 56, 56, 2, 2}, 0, 2), "fold"},
        std::pair{dgrad(Shape{32, 192, 384, 28, 28, 2, 2}, 0, 2), "fold"},
        std::pair{dgrad(Shape{32, 384, 768, 14, 14, 2, 2}, 0, 2), "fold"}}) {
    EXPECT_EQ(form(*rule, s), by_rule) << s.ToString();
    EXPECT_EQ(form(*fold, s), "fold") << s.ToString();
    EXPECT_EQ(form(*phases, s), "phases") << s.ToString();
  }
  const Shape stem = dgrad(Shape{32, 3, 64, 224, 224, 7, 7}, 3, 2);
  EXPECT_EQ(form(*rule, stem), "fold");
  EXPECT_EQ(form(*fold, stem), "fold");
  EXPECT_EQ(form(*phases, stem), "phases");
  EXPECT_EQ(fold->name(), "implicit_gemm_wgmma_dgrad_fold");
  EXPECT_EQ(phases->name(), "implicit_gemm_wgmma_dgrad_phases");
}

}  // namespace
}  // namespace conv2d
