// The benchmark's case lists and --shape's syntax, on the CPU: what the GPU run and --list rely on
// without a device to show it.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tools/benchmark/command_line.h"
#include "tools/benchmark/suites.h"

namespace conv2d {
namespace bench {
namespace {

TEST(ParseShapeTest, BasicFormAndEveryOption) {
  absl::StatusOr<Shape> s = ParseShape("32, 96,96,56,56,7,7,pad=3,groups=96,bias");
  ASSERT_TRUE(s.ok()) << s.status();
  Shape want{32, 96, 96, 56, 56, 7, 7};
  want.pad_top = want.pad_bottom = want.pad_left = want.pad_right = 3;
  want.groups = 96;
  want.has_bias = true;
  EXPECT_EQ(*s, want);

  s = ParseShape("1,8,8,9,9,3,3,pad=1:2,stride=2:1,dilation=2");
  ASSERT_TRUE(s.ok()) << s.status();
  // pad=PH:PW is rows:columns, as F.conv2d's (ph, pw).
  EXPECT_EQ(s->pad_top, 1);
  EXPECT_EQ(s->pad_bottom, 1);
  EXPECT_EQ(s->pad_left, 2);
  EXPECT_EQ(s->pad_right, 2);
  EXPECT_EQ(s->stride_h, 2);
  EXPECT_EQ(s->stride_w, 1);
  EXPECT_EQ(s->dilation_h, 2);
  EXPECT_EQ(s->dilation_w, 2);
}

TEST(ParseShapeTest, UnparseIsItsInverse) {
  for (const char* text : {"4,64,64,128,128,8,8", "1,8,8,9,9,3,3,pad=1:0:2:1,stride=2:2",
                           "2,16,32,20,24,3,5,dilation=2:1,groups=4,bias"}) {
    absl::StatusOr<Shape> s = ParseShape(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status();
    absl::StatusOr<Shape> again = ParseShape(UnparseShape(*s));
    ASSERT_TRUE(again.ok()) << UnparseShape(*s) << ": " << again.status();
    EXPECT_EQ(*again, *s) << text;
  }
  EXPECT_EQ(UnparseShape(Shape{4, 64, 64, 128, 128, 8, 8}), "4,64,64,128,128,8,8");
}

TEST(ParseShapeTest, RefusesWithTheReason) {
  EXPECT_EQ(ParseShape("1,2,3").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseShape("1,2,3,4,5,6,7,pad=1,pad=2").status().message(),
            "--shape: pad given twice in '1,2,3,4,5,6,7,pad=1,pad=2'");
  EXPECT_EQ(ParseShape("1,2,3,4,5,6,7,pad=1:2:3").status().message(),
            "--shape: pad=1:2:3 takes 1 or 2 or 4 values separated by ':'");
  EXPECT_EQ(ParseShape("1,2,2,4,5,3,3,shift=1").status().code(),
            absl::StatusCode::kInvalidArgument);
  // ValidateShape's refusals come through: groups must divide the channels.
  EXPECT_EQ(ParseShape("1,6,6,8,8,3,3,groups=4").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SplitCommandLineTest, MergesShapesAndRoutesBenchmarkFlags) {
  std::vector<std::string> words = {"benchmark", "--shape=1,2,2,4,4,3,3", "--benchmark_filter=x",
                                    "--calls=5", "--shape", "2,2,2,4,4,3,3", "-h"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(&w[0]);
  SplitArgs out;
  SplitCommandLine(static_cast<int>(argv.size()), argv.data(), &out);
  std::vector<std::string> absl_args(out.absl_args.begin(), out.absl_args.end());
  std::vector<std::string> benchmark_args(out.benchmark_args.begin(), out.benchmark_args.end());
  EXPECT_EQ(absl_args, (std::vector<std::string>{"benchmark", "--shape=1,2,2,4,4,3,3;2,2,2,4,4,3,3",
                                                 "--calls=5", "--help"}));
  EXPECT_EQ(benchmark_args, (std::vector<std::string>{"benchmark", "--benchmark_filter=x"}));
}

TEST(SuitesTest, KernelBotIsTheDefaultAndHasItsFiveCases) {
  ASSERT_FALSE(SuiteNames().empty());
  EXPECT_EQ(SuiteNames().front(), "kernelbot");
  absl::StatusOr<std::vector<Case>> cases = SuiteCases("kernelbot");
  ASSERT_TRUE(cases.ok()) << cases.status();
  EXPECT_EQ(cases->size(), 5u);
  EXPECT_EQ((*cases)[2].shape, (*cases)[3].shape);  // KernelBot repeats its third case
}

TEST(SuitesTest, UnknownSuiteNamesTheKnownOnes) {
  EXPECT_EQ(SuiteCases("foo").status().message(), "--suite is kernelbot, cnn or nets: foo");
}

TEST(SuitesTest, EveryCaseOfEverySuiteIsValidAndTheNetsCountsHold) {
  for (const std::string& name : SuiteNames()) {
    absl::StatusOr<std::vector<Case>> cases = SuiteCases(name);
    ASSERT_TRUE(cases.ok()) << name << ": " << cases.status();
    EXPECT_FALSE(cases->empty()) << name;
    for (const Case& c : *cases) EXPECT_TRUE(ValidateShape(c.shape).ok()) << c.shape.ToString();
  }
  absl::StatusOr<std::vector<Case>> nets = SuiteCases("nets");
  ASSERT_TRUE(nets.ok());
  std::map<std::string, std::pair<int, int>> per_net;  // distinct layers, Conv2d modules
  for (const Case& c : *nets) {
    EXPECT_EQ(c.shape.batch, kNetsBatch);
    for (const NetUse& u : c.uses) {
      ++per_net[u.net].first;
      per_net[u.net].second += u.count;
    }
  }
  // The counts the table's comments state (tools/nets_layers.py checks them against torchvision).
  EXPECT_EQ(per_net["resnet50"], std::make_pair(23, 53));
  EXPECT_EQ(per_net["convnext_tiny"], std::make_pair(8, 22));
  EXPECT_EQ(per_net["efficientnet_b0"], std::make_pair(46, 81));
  EXPECT_EQ(per_net["large_kernel_dw"], std::make_pair(2, 2));
  // Each network has one input layer, its first (whose dgrad a training step skips); the
  // large-kernel set's layers are not a network's inputs.
  std::map<std::string, int> inputs;
  for (const Case& c : *nets)
    for (const NetUse& u : c.uses) {
      if (u.input) {
        ++inputs[u.net];
        EXPECT_EQ(c.shape.in_channels, 3) << u.net << " " << u.module;
        EXPECT_EQ(u.count, 1) << u.net << " " << u.module;
      }
    }
  EXPECT_EQ(inputs["resnet50"], 1);
  EXPECT_EQ(inputs["convnext_tiny"], 1);
  EXPECT_EQ(inputs["efficientnet_b0"], 1);
  EXPECT_EQ(inputs.count("large_kernel_dw"), 0u);
}

TEST(SuitesTest, SeedsFollowTheCaseIndex) {
  std::vector<Case> cases(3);
  AssignSeeds(10, &cases);
  EXPECT_EQ(cases[0].seed, 10u);
  EXPECT_EQ(cases[2].seed, 12u);
}

}  // namespace
}  // namespace bench
}  // namespace conv2d
