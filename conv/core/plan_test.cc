// Plan creation, shape validation and dispatch: everything that needs no GPU.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "conv/algorithms/builtin.h"
#include "conv/algorithms/direct/direct.h"
#include "conv/conv.h"
#include "conv/core/registry.h"
#include "conv/core/status_macros.h"
#include "conv/core/transposed_dgrad.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

TEST(ValidateShapeTest, AcceptsValidShapes) {
  for (const Shape& s : EdgeShapes()) EXPECT_TRUE(ValidateShape(s).ok()) << s.ToString();
  for (const Shape& s : KernelBotBenchmarkShapes()) EXPECT_TRUE(ValidateShape(s).ok());
}

TEST(ValidateShapeTest, RejectsZeroNegativeAndOversizedKernels) {
  const Shape good{2, 3, 4, 10, 12, 3, 5};
  int64_t Shape::*fields[] = {&Shape::batch, &Shape::in_channels, &Shape::out_channels,
                              &Shape::height, &Shape::width, &Shape::kernel_h, &Shape::kernel_w};
  for (auto f : fields) {
    for (int64_t v : {int64_t{0}, int64_t{-3}}) {
      Shape s = good;
      s.*f = v;
      absl::Status st = ValidateShape(s);
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << s.ToString();
      EXPECT_NE(st.message().find("must be positive"), absl::string_view::npos) << st;
    }
  }
  Shape tall = good;
  tall.kernel_h = 11;
  EXPECT_NE(ValidateShape(tall).message().find("larger than the image"), absl::string_view::npos);
  Shape wide = good;
  wide.kernel_w = 13;
  EXPECT_EQ(ValidateShape(wide).code(), absl::StatusCode::kInvalidArgument);
  Shape huge{1 << 20, 1 << 20, 1, 1 << 10, 1 << 10, 1, 1};
  EXPECT_EQ(ValidateShape(huge).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ValidateShapeTest, Int32Limit) {
  EXPECT_TRUE(CheckFitsInt32(Shape::KernelBot(256, 32, 128, 1), "k").ok());
  const Shape big{64, 512, 64, 256, 256, 1, 1};  // 2^31 input elements
  absl::Status st = CheckFitsInt32(big, "direct_tiled");
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("direct_tiled"), absl::string_view::npos);
}

TEST(PlanTest, ErrorsComeInOrderShapeThenNameThenDevice) {
  EXPECT_EQ(Plan::Create(Shape{0, 1, 1, 4, 4, 1, 1}, "no_such").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status unknown = Plan::Create(Shape{1, 1, 1, 4, 4, 1, 1}, "no_such").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("no_such"), absl::string_view::npos);
  EXPECT_NE(unknown.message().find("direct"), absl::string_view::npos);  // lists the names

  absl::StatusOr<Plan> plan = Plan::Create(Shape{1, 1, 1, 4, 4, 1, 1}, "direct");
  if (HaveGpu()) {
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->algorithm(), "direct");
    EXPECT_EQ(plan->workspace_bytes(), 0u);
  } else {
    std::printf("NOTE: no CUDA device here: checking that Plan::Create says so.\n");
    EXPECT_EQ(Plan::Create(Shape{1, 1, 1, 4, 4, 1, 1}, "autotune").status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(plan.status().message().find("no CUDA device"), absl::string_view::npos);
  }
}

TEST(DispatchTest, AutoPicksAFiniteEstimateAndNeverTheOracle) {
  for (const Shape& s : EdgeShapes()) {
    absl::StatusOr<std::string> name = ChooseAlgorithm(s);
    ASSERT_TRUE(name.ok()) << s.ToString() << ": " << name.status();
    EXPECT_NE(*name, "direct") << s.ToString();
    const Algorithm* a = Registry::Global().Find(*name);
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(a->CanImplement(s).ok());
    EXPECT_TRUE(std::isfinite(a->EstimateSeconds(s)));
  }
}

// The fastest variant that passed the fp64 bar on each shape of both suites, measured on the H200
// (docs/data/round45_fit_kernelbot.json, round45_fit_cnn.json; PERF.md round 45). Auto's model
// (each proposal's estimate times its algorithm's calibration()) must reproduce those picks; a change to a
// kernel or a model that moves one fails here until the measurements are redone and refitted
// (tools/fit_auto.py). On (32,256,256,14,3) winograd is 3% slower than implicit_gemm_wgmma.
TEST(DispatchTest, AutoPicksTheMeasuredFastestOnBothSuites) {
  std::vector<std::pair<Shape, const char*>> expected;
  for (const Shape& s : KernelBotBenchmarkShapes()) expected.push_back({s, "fft_fused_3xtf32"});
  const char* const cnn[] = {"implicit_gemm_wgmma", "implicit_gemm_wgmma", "implicit_gemm_wgmma",
                             "implicit_gemm_wgmma", "implicit_gemm_wgmma", "fft_fused_3xtf32",
                             "implicit_gemm_wgmma", "fft_fused_3xtf32",    "implicit_gemm_wgmma",
                             "implicit_gemm_wgmma"};
  const std::vector<Shape> cnn_shapes = CnnShapes();
  ASSERT_EQ(cnn_shapes.size(), std::size(cnn));
  for (size_t i = 0; i < cnn_shapes.size(); ++i) expected.push_back({cnn_shapes[i], cnn[i]});
  for (const auto& [shape, best] : expected) {
    absl::StatusOr<std::string> name = ChooseAlgorithm(shape);
    ASSERT_TRUE(name.ok()) << shape.ToString() << ": " << name.status();
    EXPECT_EQ(*name, best) << shape.ToString();
  }
}

// The nets suite's layers where round 87 measured every variant (docs/data/round87_small_1x1.txt):
// the 1x1 layers of 16-32 input channels go to implicit_gemm_wgmma (2-5x faster than
// direct_tiled, 19-28x than triton_igemm, which the models once preferred), the squeeze-excite
// layers to dot.
TEST(DispatchTest, AutoPicksTheMeasuredFastestOnSmallNetsLayers) {
  Shape se_expand{32, 48, 1152, 1, 1, 1, 1}, se_reduce{32, 1152, 48, 1, 1, 1, 1};
  se_expand.has_bias = se_reduce.has_bias = true;
  const std::vector<std::pair<Shape, const char*>> expected = {
      {Shape{32, 32, 16, 112, 112, 1, 1}, "implicit_gemm_wgmma"},
      {Shape{32, 16, 96, 112, 112, 1, 1}, "implicit_gemm_wgmma"},
      {Shape{32, 24, 144, 56, 56, 1, 1}, "implicit_gemm_wgmma"},
      {se_expand, "dot"},
      {se_reduce, "dot"},
      // Depthwise (round 88, docs/data/round88_nets_dw.json): the FFT per channel only at 31x31.
      {DepthwiseShape(32, 128, 1, 56, 56, 31, 31, 15), "fft_depthwise"},
      {DepthwiseShape(32, 1024, 1, 7, 7, 13, 13, 6), "depthwise"},
      {DepthwiseShape(32, 96, 1, 56, 56, 7, 7, 3), "depthwise"},
      {DepthwiseShape(32, 144, 1, 56, 56, 3, 3, 1), "depthwise"}};
  for (const auto& [shape, best] : expected) {
    absl::StatusOr<std::string> name = ChooseAlgorithm(shape);
    ASSERT_TRUE(name.ok()) << shape.ToString() << ": " << name.status();
    EXPECT_EQ(*name, best) << shape.ToString();
  }
}

// auto's dgrad picks on the nets suite's stride-1 layers as H100 call F measured them (PERF.md
// round 107, docs/data/round107_h100_nets_train.txt): implicit_gemm_wgmma's one forward of dy on
// ResNet-50's 3x3 and 1x1 layers and EfficientNet-B0's 1x1 layers, dot on the squeeze-excite
// layers. Round 109's first fold rule sent some of them to the fold (a pass over dx more, and
// fft_fused_3xtf32 on ResNet's 3x3 at 14x14: 0.092 -> 0.348 ms).
TEST(DispatchTest, AutoKeepsTheMeasuredDgradPicksAtStrideOne) {
  auto dgrad = [](Shape s, int64_t pad) {
    s = WithGeometry(s, pad, pad, pad, pad, 1, 1);
    s.op = Op::kDgrad;
    return s;
  };
  const std::vector<std::pair<Shape, const char*>> expected = {
      {dgrad(Shape{32, 64, 64, 56, 56, 3, 3}, 1), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 128, 128, 28, 28, 3, 3}, 1), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 256, 256, 14, 14, 3, 3}, 1), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 512, 512, 7, 7, 3, 3}, 1), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 64, 64, 56, 56, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 256, 64, 56, 56, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 512, 128, 28, 28, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 1024, 256, 14, 14, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 2048, 512, 7, 7, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 512, 2048, 7, 7, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 144, 24, 56, 56, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 144, 40, 28, 28, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 240, 40, 28, 28, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 480, 80, 14, 14, 1, 1}, 0), "implicit_gemm_wgmma"},
      {dgrad(Shape{32, 32, 8, 1, 1, 1, 1}, 0), "dot"},
      {dgrad(Shape{32, 480, 20, 1, 1, 1, 1}, 0), "dot"}};
  for (const auto& [shape, best] : expected) {
    absl::StatusOr<std::string> name = ChooseAlgorithm(shape);
    ASSERT_TRUE(name.ok()) << shape.ToString() << ": " << name.status();
    EXPECT_EQ(*name, best) << shape.ToString();
  }
}

// dgrad by the fold where a phase's forward would have few output channels: the stems (Cin = 3)
// of ResNet-50 (7x7/2), EfficientNet-B0 (3x3/2) and ConvNeXt-T (4x4/4); where the taps do not
// overlap (ConvNeXt's 2x2/2 at every size); where they overlap and one phase would fill at most
// half the SMs (ResNet's 3x3/2 at 14x14, not at 28x28 or 56x56). By phases or, at stride 1, the
// one forward elsewhere, at every size (a 1x1 is not "taps apart" at stride 1: the fold would
// add a pass over dx): the fold measured slower on the 1x1/2 and strided depthwise layers though
// its model ranked it first (algorithm.cc's FoldBeatsPhases). implicit_gemm_wgmma's model on
// the model device.
TEST(DispatchTest, TheStemsDgradIsAFold) {
  const Algorithm* alg = Registry::Global().Find("implicit_gemm_wgmma");
  ASSERT_NE(alg, nullptr);
  auto dgrad = [](Shape s, int64_t pad, int64_t stride) {
    s = WithGeometry(s, pad, pad, pad, pad, stride, stride, 1, 1, s.groups);  // keeps groups
    s.op = Op::kDgrad;
    return s;
  };
  const std::vector<std::pair<Shape, bool>> expected = {
      {dgrad(Shape{32, 3, 64, 224, 224, 7, 7}, 3, 2), true},
      {dgrad(Shape{32, 3, 32, 224, 224, 3, 3}, 1, 2), true},
      {dgrad(Shape{32, 3, 96, 224, 224, 4, 4}, 0, 4), true},
      {dgrad(Shape{32, 64, 64, 56, 56, 3, 3}, 1, 1), false},
      {dgrad(Shape{32, 256, 256, 14, 14, 3, 3}, 1, 1), false},
      {dgrad(Shape{32, 512, 512, 7, 7, 3, 3}, 1, 1), false},
      {dgrad(Shape{32, 1024, 256, 14, 14, 1, 1}, 0, 1), false},
      {dgrad(Shape{32, 40, 240, 28, 28, 1, 1}, 0, 1), false},
      {dgrad(Shape{32, 1152, 48, 1, 1, 1, 1}, 0, 1), false},  // squeeze-excite
      {dgrad(Shape{32, 128, 128, 56, 56, 3, 3}, 1, 2), false},
      {dgrad(Shape{32, 256, 256, 28, 28, 3, 3}, 1, 2), false},
      {dgrad(Shape{32, 512, 512, 14, 14, 3, 3}, 1, 2), true},
      {dgrad(Shape{32, 256, 512, 56, 56, 1, 1}, 0, 2), false},
      {dgrad(Shape{32, 1024, 2048, 14, 14, 1, 1}, 0, 2), false},
      {dgrad(Shape{32, 96, 192, 56, 56, 2, 2}, 0, 2), true},
      {dgrad(Shape{32, 192, 384, 28, 28, 2, 2}, 0, 2), true},
      {dgrad(Shape{32, 384, 768, 14, 14, 2, 2}, 0, 2), true},
      {dgrad(Shape{8, 384, 768, 14, 14, 1, 1}, 0, 2), false},  // 1x1/2: taps reach a quarter
      {dgrad(DepthwiseShape(32, 240, 1, 28, 28, 3, 3), 1, 2), false}};
  for (const auto& [shape, fold] : expected) {
    absl::StatusOr<Proposal> p = alg->Propose(shape, DeviceInfo::ModelDevice());
    ASSERT_TRUE(p.ok()) << shape.ToString() << ": " << p.status();
    const TransposedDgradProposal* t = ConfigOf<TransposedDgradProposal>(*p);
    ASSERT_NE(t, nullptr) << shape.ToString();
    EXPECT_EQ(t->phases.size() == 1 && t->phases[0].fold, fold) << shape.ToString();
  }
}

// Grouped layers of several channels per group (ResNeXt's 32 groups of 8 at 256 wide, stride 1
// and 2; two groups of odd width) had no algorithm auto may pick; grouped_direct takes them. By
// its model only (calibration 1.0, not yet measured against anything: nothing else takes them).
TEST(DispatchTest, AutoPicksGroupedDirectForSeveralChannelsPerGroup) {
  std::vector<Shape> shapes;
  for (int64_t hw : {56, 28, 14}) {
    for (int64_t stride : {1, 2}) {
      shapes.push_back(
          WithGeometry(Shape{32, 256, 256, hw, hw, 3, 3}, 1, 1, 1, 1, stride, stride, 1, 1, 32));
    }
  }
  shapes.push_back(WithGeometry(Shape{2, 6, 10, 21, 18, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1, 2, true));
  for (const Shape& s : GeometryShapes()) {
    if (s.grouped() && s.in_per_group() > 1) shapes.push_back(s);
  }
  for (const Shape& s : shapes) {
    absl::StatusOr<std::string> name = ChooseAlgorithm(s);
    ASSERT_TRUE(name.ok()) << s.ToString() << ": " << name.status();
    EXPECT_EQ(*name, "grouped_direct") << s.ToString();
  }
}

// "auto" ranks by the model without asking the GPU; an algorithm whose Initialize says it cannot
// run on this device (FailedPrecondition, as implicit_gemm_wgmma does off sm_90) hands the
// choice to the next best instead of failing the plan.
class NeedsAnotherGpu : public Algorithm {
 public:
  static Shape Only() { return Shape{3, 1, 2, 13, 7, 4, 2}; }
  std::string name() const override { return "test_needs_another_gpu"; }
  double calibration() const override { return 1; }
  absl::StatusOr<Proposal> ProposeFor(const Shape& s, const DeviceInfo&) const override {
    if (!(s == Only())) return absl::UnimplementedError("test: one shape only");
    return Proposal{};  // 0 seconds: always the model's pick
  }
  absl::StatusOr<std::unique_ptr<Runner>> InitializeFor(const Shape&, const Proposal&,
                                                     const DeviceInfo&) const override {
    return absl::FailedPreconditionError("test: needs another GPU");
  }
};

TEST(DispatchTest, AutoPassesOverAnAlgorithmThatCannotRunOnThisGpu) {
  static const bool added = Registry::Global().Add(std::make_unique<NeedsAnotherGpu>()).ok();
  ASSERT_TRUE(added);
  const Shape s = NeedsAnotherGpu::Only();
  absl::StatusOr<std::string> pick = ChooseAlgorithm(s);
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(*pick, "test_needs_another_gpu");
  absl::StatusOr<Plan> plan = Plan::Create(s);
  if (!HaveGpu()) {
    std::printf("NOTE: no CUDA device here: the fallback itself runs in the GPU bundle.\n");
    EXPECT_NE(plan.status().message().find("no CUDA device"), absl::string_view::npos)
        << plan.status();
    return;
  }
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NE(plan->algorithm(), "test_needs_another_gpu");
  // Named explicitly, its own error comes back.
  EXPECT_EQ(Plan::Create(s, "test_needs_another_gpu").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

class Named : public Algorithm {
 public:
  explicit Named(std::string n) : n_(std::move(n)) {}
  std::string name() const override { return n_; }
  double calibration() const override { return 1; }
  absl::StatusOr<Proposal> ProposeFor(const Shape&, const DeviceInfo&) const override {
    return MakeProposal(1, 1.0);
  }
  absl::StatusOr<std::unique_ptr<Runner>> InitializeFor(const Shape&, const Proposal&,
                                                     const DeviceInfo&) const override {
    return absl::UnimplementedError("test");
  }

 private:
  std::string n_;
};

TEST(RegistryTest, TheBuiltinListRegistersWholeWithUniqueNames) {
  EXPECT_TRUE(Registry::Global().status().ok()) << Registry::Global().status();
  Registry r;
  ASSERT_TRUE(r.AddAll(BuiltinAlgorithms()).ok());
  const auto names = r.Names();
  EXPECT_EQ(names.size(), BuiltinAlgorithms().size());
  for (const auto& n : names) {
    EXPECT_EQ(n.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_"), std::string::npos);
  }
  // A duplicate is an error, never a silent shadow: by Add, and by a list that repeats a name.
  EXPECT_EQ(r.Add(std::make_unique<Named>(names[0])).code(), absl::StatusCode::kAlreadyExists);
  Registry twice;
  EXPECT_TRUE(twice.AddAll(BuiltinAlgorithms()).ok());
  EXPECT_EQ(twice.AddAll(BuiltinAlgorithms()).code(), absl::StatusCode::kAlreadyExists);
  for (const char* bad : {"auto", "autotune", "Upper", "has space", ""}) {
    EXPECT_EQ(r.Add(std::make_unique<Named>(bad)).code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_TRUE(r.Add(std::make_unique<Named>("mine")).ok());
  EXPECT_NE(r.Find("mine"), nullptr);
}

// A proposal is read only by the algorithm that made it.
TEST(RegistryTest, AProposalOfAnotherTypeIsRefused) {
  const Proposal p = MakeProposal(std::string("not a tiling"), 1.0);
  EXPECT_EQ(ConfigOf<int>(p), nullptr);
  ASSERT_NE(ConfigOf<std::string>(p), nullptr);
  EXPECT_EQ(*ConfigOf<std::string>(p), "not a tiling");
  for (const Algorithm* a : Registry::Global().All()) {
    absl::StatusOr<Proposal> own = a->Propose(Shape{1, 2, 3, 9, 9, 3, 3}, DeviceInfo::ModelDevice());
    if (!own.ok() || own->config == nullptr) continue;
    EXPECT_EQ(a->Initialize(Shape{1, 2, 3, 9, 9, 3, 3}, p, DeviceInfo::ModelDevice())
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << a->name();
  }
}

// Adding an algorithm is its factory plus one registration (docs/DESIGN.md): a trivial one,
// the fp64 oracle's kernel offered at a finite estimate for one shape, becomes auto's pick
// there and runs through Plan like any other.
class Trivial : public Algorithm {
 public:
  static Shape Only() { return Shape{2, 3, 5, 11, 9, 3, 2}; }
  std::string name() const override { return "test_trivial"; }
  double calibration() const override { return 1; }
  absl::StatusOr<Proposal> ProposeFor(const Shape& s, const DeviceInfo& d) const override {
    if (!(s == Only())) return absl::UnimplementedError("test_trivial: one shape only");
    ASSIGN_OR_RETURN(Proposal p, direct_->Propose(s, d));
    p.estimated_seconds = 0;
    return p;
  }
  absl::StatusOr<std::unique_ptr<Runner>> InitializeFor(const Shape& s, const Proposal& p,
                                                     const DeviceInfo& d) const override {
    return direct_->Initialize(s, p, d);
  }

 private:
  std::unique_ptr<Algorithm> direct_ = MakeDirect();
};

std::unique_ptr<Algorithm> MakeTrivial() { return std::make_unique<Trivial>(); }

TEST(RegistryTest, AddingAnAlgorithmIsOneRegistration) {
  ASSERT_TRUE(Registry::Global().AddAll({&MakeTrivial}).ok());
  const std::vector<std::string> names = Algorithms();
  EXPECT_EQ(names.back(), "test_trivial");
  absl::StatusOr<std::string> pick = ChooseAlgorithm(Trivial::Only());
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(*pick, "test_trivial");
  absl::StatusOr<std::string> other = ChooseAlgorithm(Shape{2, 3, 5, 11, 9, 3, 3});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(*other, "test_trivial");
  absl::StatusOr<Plan> plan = Plan::Create(Trivial::Only());
  if (!HaveGpu()) {
    std::printf("NOTE: no CUDA device here: the trivial algorithm's run is checked in the GPU "
                "bundle.\n");
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
    return;
  }
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->algorithm(), "test_trivial");
  const Shape s = Trivial::Only();
  float *x, *w, *y;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&x), 4 * s.input_elements()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&w), 4 * s.filter_elements()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&y), 4 * s.output_elements()), cudaSuccess);
  std::vector<float> ones_x(s.input_elements(), 1.0f), ones_w(s.filter_elements(), 0.5f);
  ASSERT_EQ(cudaMemcpy(x, ones_x.data(), 4 * ones_x.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(w, ones_w.data(), 4 * ones_w.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(plan->Run(x, w, y, nullptr, 0, nullptr).ok());
  std::vector<float> hy(s.output_elements(), -1.0f);
  ASSERT_EQ(cudaMemcpy(hy.data(), y, 4 * hy.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  // Every output sums Cin * Kh * Kw = 18 products of 1 * 0.5.
  for (float v : hy) EXPECT_EQ(v, 9.0f);
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
}

Tensors Fwd(const void* x, const void* w, const void* y, const void* bias = nullptr) {
  Tensors t;
  t.x = static_cast<const float*>(x);
  t.w = static_cast<const float*>(w);
  t.bias = static_cast<const float*>(bias);
  t.y = static_cast<float*>(const_cast<void*>(y));
  return t;
}

TEST(RunArgsTest, NullPointersAndSmallWorkspace) {
  const Shape s{1, 1, 1, 1, 1, 1, 1};
  float f[3] = {};
  alignas(16) char ws[24];
  EXPECT_TRUE(ValidateTensors(s, Fwd(f, f + 1, f + 2), nullptr, 0, 0).ok());
  EXPECT_NE(ValidateTensors(s, Fwd(nullptr, f + 1, f + 2), ws, 8, 8).message().find("x is null"),
            absl::string_view::npos);
  EXPECT_NE(ValidateTensors(s, Fwd(f, nullptr, f + 2), ws, 8, 8).message().find("w is null"),
            absl::string_view::npos);
  EXPECT_NE(ValidateTensors(s, Fwd(f, f + 1, nullptr), ws, 8, 8).message().find("y is null"),
            absl::string_view::npos);
  absl::Status small = ValidateTensors(s, Fwd(f, f + 1, f + 2), ws, 4, 8);
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.message().find("workspace too small"), absl::string_view::npos);
  EXPECT_EQ(ValidateTensors(s, Fwd(f, f + 1, f + 2), nullptr, 8, 8).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RunArgsTest, MisalignedPointersAreRefused) {
  const Shape s{1, 1, 1, 1, 1, 1, 1};
  alignas(16) float mem[8] = {};
  const void* off = reinterpret_cast<const char*>(mem) + 1;
  alignas(16) char ws[32];
  EXPECT_TRUE(ValidateTensors(s, Fwd(mem, mem + 1, mem + 2), ws, 16, 16).ok());
  for (int which = 0; which < 3; ++which) {
    const void* p[3] = {mem, mem + 1, mem + 2};
    p[which] = off;
    absl::Status st = ValidateTensors(s, Fwd(p[0], p[1], p[2]), ws, 16, 16);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << which;
    EXPECT_NE(st.message().find("not aligned to 4 bytes"), absl::string_view::npos) << st;
  }
  // The workspace needs no alignment: each runner aligns within it.
  EXPECT_TRUE(ValidateTensors(s, Fwd(mem, mem + 1, mem + 2), ws + 1, 16, 16).ok());
}

TEST(RunArgsTest, MemoryTheDeviceCannotReadIsRefused) {
  if (!HaveGpu()) {
    std::printf("NOTE: no CUDA device here: the device-access checks run in the GPU bundle.\n");
    EXPECT_EQ(ValidateDeviceAccess(0, Tensors{}, nullptr).code(),
              absl::StatusCode::kFailedPrecondition);
    return;
  }
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 64), cudaSuccess);
  std::vector<float> pageable(16);
  EXPECT_TRUE(ValidateDeviceAccess(device, Fwd(d, d, d), nullptr).ok());
  absl::Status st = ValidateDeviceAccess(device, Fwd(pageable.data(), d, d), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("pageable"), absl::string_view::npos) << st;
  EXPECT_FALSE(ValidateDeviceAccess(device, Fwd(d, d, pageable.data()), nullptr).ok());
  EXPECT_FALSE(ValidateDeviceAccess(device, Fwd(d, d, d), pageable.data()).ok());
  Tensors back;
  back.dy = d;
  back.dx = pageable.data();
  EXPECT_FALSE(ValidateDeviceAccess(device, back, nullptr).ok());
  st = ValidateDeviceAccess(device + 1, Fwd(d, d, d), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("is current"), absl::string_view::npos) << st;
  cudaFree(d);
}

TEST(RunArgsTest, OverlapsOfWrittenBuffersAreRefused) {
  // x 2*3*5*5 = 150 floats, w 4*3*2*2 = 48, y 2*4*4*4 = 128; a 64-byte workspace.
  const Shape s{2, 3, 4, 5, 5, 2, 2};
  std::vector<float> mem(1000);
  float* x = mem.data();
  float* w = x + 150;
  float* y = w + 48;
  float* ws = y + 128;
  EXPECT_TRUE(ValidateTensors(s, Fwd(x, w, y), ws, 64, 64).ok());
  EXPECT_TRUE(ValidateTensors(s, Fwd(x, x, y), ws, 64, 64).ok());  // x and w are only read
  EXPECT_TRUE(ValidateTensors(s, Fwd(x, w, y), nullptr, 0, 0).ok());
  absl::Status st = ValidateTensors(s, Fwd(x, w, x + 149), ws, 64, 64);  // y's first is x's last
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x and y overlap"), absl::string_view::npos) << st;
  EXPECT_FALSE(ValidateTensors(s, Fwd(x, w, w + 47), ws, 64, 64).ok());
  EXPECT_FALSE(ValidateTensors(s, Fwd(x, w, y), y + 127, 64, 64).ok());  // workspace over y's end
  EXPECT_FALSE(ValidateTensors(s, Fwd(x, w, y), x, 4, 4).ok());          // workspace over x
  EXPECT_TRUE(ValidateTensors(s, Fwd(x, w, y), y + 128, 64, 64).ok());   // adjacent is fine
}

// The backward's roles: exactly the operation's are given, the written ones (dx; dw and db)
// overlap nothing, a bias is wgrad's db.
TEST(RunArgsTest, TheBackwardsRoles) {
  Shape s{2, 3, 4, 5, 5, 2, 2};  // x 150 floats, w 48, y (dy) 128, bias 4
  std::vector<float> mem(1000);
  float* x = mem.data();
  float* w = x + 150;
  float* y = w + 48;
  float* b = y + 128;
  auto says = [](const absl::Status& st, const char* what) {
    return st.code() == absl::StatusCode::kInvalidArgument &&
           st.message().find(what) != absl::string_view::npos;
  };
  s.op = Op::kDgrad;
  Tensors d;
  d.dy = y, d.w = w, d.dx = x;
  EXPECT_TRUE(ValidateTensors(s, d, nullptr, 0, 0).ok());
  Tensors wrong = d;
  wrong.dx = nullptr;
  EXPECT_TRUE(says(ValidateTensors(s, wrong, nullptr, 0, 0), "dx is null"));
  wrong = d;
  wrong.x = x;  // the forward's input given to dgrad
  EXPECT_TRUE(says(ValidateTensors(s, wrong, nullptr, 0, 0), "x was given but dgrad"));
  wrong = d;
  wrong.dx = y + 100;  // dx over dy
  EXPECT_TRUE(says(ValidateTensors(s, wrong, nullptr, 0, 0), "overlap"));
  wrong = d;
  wrong.dx = w + 10;  // dx over w
  EXPECT_TRUE(says(ValidateTensors(s, wrong, nullptr, 0, 0), "overlap"));
  EXPECT_TRUE(says(ValidateTensors(s, d, x + 10, 64, 64), "overlap"));  // workspace over dx

  s.op = Op::kWgrad;
  s.has_bias = true;
  Tensors g;
  g.x = x, g.dy = y, g.dw = w, g.db = b;
  EXPECT_TRUE(ValidateTensors(s, g, nullptr, 0, 0).ok());
  wrong = g;
  wrong.db = nullptr;
  EXPECT_TRUE(says(ValidateTensors(s, wrong, nullptr, 0, 0), "has a bias but the db pointer is null"));
  wrong = g;
  wrong.db = w + 46;  // db over dw's end
  EXPECT_TRUE(says(ValidateTensors(s, wrong, nullptr, 0, 0), "and db overlap"));
  wrong = g;
  wrong.dw = y;  // dw over dy
  EXPECT_TRUE(says(ValidateTensors(s, wrong, nullptr, 0, 0), "overlap"));
  wrong = g;
  wrong.y = y;  // the forward's output given to wgrad
  EXPECT_TRUE(says(ValidateTensors(s, wrong, nullptr, 0, 0), "y was given but wgrad"));
  s.has_bias = false;
  EXPECT_TRUE(says(ValidateTensors(s, g, nullptr, 0, 0), "make the plan with has_bias"));
  g.db = nullptr;
  EXPECT_TRUE(ValidateTensors(s, g, nullptr, 0, 0).ok());
}

}  // namespace
}  // namespace conv2d
