// The lab is measurement only: registering it changes none of auto's choices, over the standard
// shape lists and a grid of batch, channels, image and kernel sizes. If a lab algorithm ever
// became auto's choice for some shape, it would belong in the library, and this fails.
#include <algorithm>
#include <string>
#include <vector>

#include "conv/conv.h"
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

TEST(Lab, AutoChoosesTheSameWithTheLabRegistered) {
  const std::vector<Shape> shapes = Sweep();
  std::vector<std::string> before;
  for (const Shape& s : shapes) {
    absl::StatusOr<std::string> pick = ChooseAlgorithm(s);
    before.push_back(pick.ok() ? *pick : std::string(pick.status().message()));
  }
  ASSERT_TRUE(RegisterLabAlgorithms().ok());
  for (const AlgorithmFactory make : LabAlgorithms()) {
    const std::string name = make()->name();
    const std::vector<std::string> all = Algorithms();
    EXPECT_NE(std::find(all.begin(), all.end(), name), all.end()) << name << " not registered";
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    absl::StatusOr<std::string> pick = ChooseAlgorithm(shapes[i]);
    EXPECT_EQ(pick.ok() ? *pick : std::string(pick.status().message()), before[i])
        << shapes[i].ToString();
  }
  EXPECT_EQ(RegisterLabAlgorithms().code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace conv2d
