// fft_fused on the GPU against the fp64 reference: edge shapes, the KernelBot test shapes,
// padded shapes (asymmetric, wider than the kernel, tiles wholly in the padding) with every
// input class, forced tile sizes and pair counts, inputs and filters changed between calls on one
// plan, the worst error ratio on the benchmark shapes, and per-stage times for calibrating the
// cost model. Fails (never skips) when no GPU is present.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "conv/conv.h"
#include "conv/algorithms/fft/cgemm_3xtf32.h"
#include "conv/core/cuda_status.h"
#include "conv/algorithms/fft/fft_fused_internal.h"
#include "tools/lab/fft_fused_stage_times.h"
#include "conv/core/registry.h"
#include "conv/core/status_macros.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"
#include "reference/reference.h"

namespace conv2d {
namespace fft_fused {
namespace {

constexpr int64_t kPositions = 1 << 16;
// What the benchmark shapes must keep: fft_tiled's prototype (cuFFT) measured 0.51-0.56 on the
// K=32 case.
constexpr double kBenchmarkRatioLimit = 0.6;

void Print(const std::string& what, const Shape& s, uint64_t seed, const Comparison& c) {
  std::printf("fft_fused %-18s %-34s seed %-4llu %s\n", what.c_str(), s.ToString().c_str(),
              static_cast<unsigned long long>(seed), c.ToString().c_str());
}

std::string ConfigName(const Shape& s, const Options& o) {
  absl::StatusOr<Config> c = ChooseConfig(s, o);
  if (!c.ok()) return "?";
  return std::to_string(c->geometry.tile_h) + "x" + std::to_string(c->geometry.tile_w) + " p" +
         std::to_string(c->smem.pairs) + (o.gemm_3xtf32 ? " tc" : "");
}

// A runner with explicit options, on seeded inputs, against the reference.
absl::StatusOr<Comparison> CheckWithOptions(const Shape& s, const Options& o, uint64_t seed,
                                            int64_t max_positions) {
  ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner, CreateRunner(s, o));
  ASSIGN_OR_RETURN(DeviceProblem p, DeviceProblem::Create(s, seed));
  const Expected e = ReferenceFor(p, max_positions, seed);
  DeviceBuffer ws;
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&ws.p, runner->workspace_bytes()), "cudaMalloc ws"));
  return RunAndCompare(*runner, p, e, ws.p, runner->workspace_bytes(), nullptr);
}

// The registered variants: the channel mix on cuBLAS's CGEMM and on the tensor cores (3xTF32).
const char* const kVariants[] = {"fft_fused", "fft_fused_3xtf32"};

Options VariantOptions(const std::string& name) {
  Options o;
  o.gemm_3xtf32 = name == "fft_fused_3xtf32";
  return o;
}

// Every variant takes every shape here; a refusal is a test failure.
bool Refused(const std::string& variant, const Shape& s) {
  const Algorithm* a = Registry::Global().Find(variant);
  if (a == nullptr) return false;
  absl::Status can = a->CanImplement(s);
  EXPECT_TRUE(can.ok()) << variant << " refused " << s.ToString() << ": " << can;
  return !can.ok();
}

TEST(FftFusedTest, IsRegistered) {
  const std::vector<std::string> names = Algorithms();
  for (const char* v : kVariants) EXPECT_NE(std::find(names.begin(), names.end(), v), names.end());
  for (const Shape& s : KernelBotBenchmarkShapes()) {
    absl::StatusOr<std::string> chosen = ChooseAlgorithm(s);
    std::printf("auto picks %s for %s\n", chosen.ok() ? chosen->c_str() : "nothing",
                s.ToString().c_str());
  }
}

class FftFusedShapeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(FftFusedShapeTest, MatchesFp64Reference) {
  const Shape s = GetParam();
  for (const char* v : kVariants) {
    if (Refused(v, s)) continue;
    for (uint64_t seed : {uint64_t{1}, uint64_t{2}}) {
      absl::StatusOr<Comparison> c = CheckAgainstReference(s, v, seed, kPositions);
      ASSERT_TRUE(c.ok()) << v << ": " << c.status();
      Print(std::string(v) + " " + ConfigName(s, VariantOptions(v)), s, seed, *c);
      EXPECT_TRUE(c->ok()) << v << " " << s.ToString() << " " << c->ToString()
                           << " first failure at " << c->first_failure;
    }
  }
}

// Zero padding (the tiles cover the padded image; their loads read zero outside x): every side
// different, "same" padding, padding wider than the kernel's half and than the kernel, tiles
// wholly in the padding, one output row, K = 1, and network-sized "same" layers (sampled).
std::vector<Shape> PaddedShapes() {
  return {
      WithGeometry({2, 5, 7, 23, 19, 3, 4}, 2, 0, 1, 3, 1, 1),  // GeometryShapes' padded one
      WithGeometry({2, 8, 8, 33, 31, 3, 3}, 1, 1, 1, 1, 1, 1),
      WithGeometry({1, 4, 6, 33, 31, 5, 5}, 4, 3, 0, 6, 1, 1),
      WithGeometry({1, 3, 2, 40, 37, 17, 9}, 8, 8, 4, 4, 1, 1),
      WithGeometry({2, 2, 3, 9, 7, 4, 3}, 5, 6, 7, 3, 1, 1),
      WithGeometry({1, 2, 2, 6, 6, 3, 3}, 20, 0, 0, 20, 1, 1),
      WithGeometry({1, 2, 3, 10, 20, 16, 9}, 3, 3, 0, 0, 1, 1),
      WithGeometry({2, 3, 2, 5, 7, 1, 1}, 1, 2, 3, 0, 1, 1),
      WithGeometry({1, 2, 3, 100, 20, 100, 9}, 13, 2, 4, 4, 1, 1),
      WithGeometry({2, 16, 32, 56, 56, 7, 7}, 3, 3, 3, 3, 1, 1),
      WithGeometry(Shape::KernelBot(128, 16, 64, 1), 8, 7, 8, 7, 1, 1),
  };
}

// The shared edges, the largest kernel the variant takes, and the padded shapes.
std::vector<Shape> FftFusedShapes() {
  std::vector<Shape> shapes = EdgeAndTestShapes();
  shapes.push_back({1, 2, 3, 130, 128, 128, 100});
  for (const Shape& s : PaddedShapes()) shapes.push_back(s);
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Shapes, FftFusedShapeTest, ::testing::ValuesIn(FftFusedShapes()),
                         [](const auto& info) { return GtestName(info.param); });

TEST(FftFusedTest, RefusesKernelsLargerThanTheLargestTile) {
  const Shape s{1, 1, 1, 200, 200, 129, 3};
  EXPECT_FALSE(Plan::Create(s, "fft_fused").ok());
}

// Padding is the one part of the geometry beyond the basic form the variants compute: stride,
// dilation and groups stay Unimplemented (with padding or without).
TEST(FftFusedTest, GeometryIsPaddingOnly) {
  const Shape s{2, 4, 6, 33, 31, 5, 5};
  for (const char* v : kVariants) {
    const Algorithm* a = Registry::Global().Find(v);
    ASSERT_NE(a, nullptr) << v;
    EXPECT_TRUE(a->geometry().padding) << v;
    EXPECT_TRUE(a->CanImplement(WithGeometry(s, 2, 1, 0, 3, 1, 1)).ok()) << v;
    for (const Shape& refused :
         {WithGeometry(s, 0, 0, 0, 0, 2, 2), WithGeometry(s, 2, 2, 2, 2, 1, 2),
          WithGeometry(s, 0, 0, 0, 0, 1, 1, 2, 2), WithGeometry(s, 1, 1, 1, 1, 1, 1, 1, 1, 2)}) {
      EXPECT_EQ(a->CanImplement(refused).code(), absl::StatusCode::kUnimplemented)
          << v << " " << refused.ToString();
    }
  }
}

// Every input class (reference/input_classes.h) on padded shapes, at every output, both variants:
// large_mean is the class padding changes (a tile whose mean CleanTransforms subtracts is
// transformed with that mean in its padding; the inverse's PaddingMeanCorrection takes it out of
// the outputs whose window reaches the padding); nonfinite checks that the padding's zeros are
// multiplied (a NaN tap reaches every output of its channel, conv.h).
TEST(FftFusedTest, PaddedInputClasses) {
  const std::vector<Shape> shapes = {
      WithGeometry({2, 6, 5, 40, 37, 5, 4}, 3, 1, 0, 2, 1, 1),
      WithGeometry({4, 8, 8, 33, 31, 3, 3}, 1, 1, 1, 1, 1, 1),
      WithGeometry({1, 16, 24, 64, 48, 16, 8}, 8, 7, 4, 3, 1, 1),
      WithGeometry({1, 3, 4, 20, 18, 7, 7}, 6, 2, 9, 3, 1, 1),
  };
  for (const Shape& s : shapes) {
    for (InputClass c : AllInputClasses()) {
      absl::StatusOr<ClassProblem> p = MakeClassProblem(s, 79, c);
      ASSERT_TRUE(p.ok()) << p.status();
      for (const char* v : kVariants) {
        absl::StatusOr<Comparison> r = CheckClass(*p, v);
        ASSERT_TRUE(r.ok()) << v << " " << s.ToString() << ": " << r.status();
        std::printf("%-16s %-34s %-10s %s\n", v, s.ToString().c_str(), InputClassName(c),
                    r->ToString().c_str());
        EXPECT_TRUE(r->ok()) << v << " " << InputClassName(c) << " " << s.ToString() << ": "
                             << r->ToString() << " first failure at " << r->first_failure;
      }
    }
  }
}

TEST(FftFusedTest, ForcedTileSizesAndPairCounts) {
  struct Case {
    Shape shape;
    int64_t tile_h, tile_w;
    int pairs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 2, 5, 7, 1, 1}, 8, 8, 0},              // K = 1, tile past the image
      {{2, 2, 3, 9, 7, 4, 3}, 8, 16, 1},             // one pair per CTA, odd transform counts
      {{1, 4, 6, 33, 31, 3, 3}, 16, 32, 4},
      {{1, 4, 6, 33, 31, 3, 3}, 32, 16, 16},
      {{1, 16, 24, 64, 48, 16, 8}, 16, 128, 2},      // T = Kh, widest tile
      {{1, 6, 6, 40, 36, 32, 32}, 32, 32, 0},        // T = K: one output per tile
      {{1, 6, 6, 40, 36, 32, 32}, 64, 64, 0},        // one tile holds everything
      {{1, 3, 2, 130, 140, 17, 100}, 128, 128, 0},   // largest tile (140 KiB shared memory)
      {{1, 2, 3, 100, 20, 100, 9}, 128, 16, 8},
      {Shape::KernelBot(64, 8, 32, 2), 16, 16, 0},
      {Shape::KernelBot(64, 8, 32, 2), 8, 128, 0},
      {Shape::KernelBot(128, 16, 64, 1), 64, 64, 4},  // 4 pairs of 64x64: 140 KiB
      // Padded: tiles wholly in the padding (pads > tile), one pair per CTA; 16 pairs; Kh = 100.
      {WithGeometry({2, 2, 3, 9, 7, 4, 3}, 5, 6, 7, 3, 1, 1), 8, 16, 1},
      {WithGeometry({1, 2, 2, 6, 6, 3, 3}, 20, 0, 0, 20, 1, 1), 8, 8, 0},
      {WithGeometry({1, 4, 6, 33, 31, 3, 3}, 0, 7, 9, 0, 1, 1), 32, 16, 16},
      {WithGeometry({1, 2, 3, 100, 20, 100, 9}, 13, 2, 4, 4, 1, 1), 128, 16, 8},
      {WithGeometry({1, 3, 4, 20, 18, 7, 7}, 6, 2, 9, 3, 1, 1), 16, 8, 2},
  };
  for (const Case& c : cases) {
    Options o;
    o.tile_h = c.tile_h;
    o.tile_w = c.tile_w;
    o.pairs_per_cta = c.pairs;
    o.gemm_3xtf32 = c.tile_h == 16;  // some of them with the tensor-core mix
    absl::StatusOr<Comparison> r = CheckWithOptions(c.shape, o, 7, kPositions);
    ASSERT_TRUE(r.ok()) << c.shape.ToString() << ": " << r.status();
    Print(ConfigName(c.shape, o), c.shape, 7, *r);
    EXPECT_TRUE(r->ok()) << c.shape.ToString() << " " << ConfigName(c.shape, o) << " "
                         << r->ToString() << " first failure at " << r->first_failure;
  }
}

TEST(FftFusedTest, InputsChangeBetweenCalls) {
  for (const char* v : kVariants) {
    absl::Status st = CheckInputsChangeBetweenCalls(v);
    EXPECT_TRUE(st.ok()) << st;
    // Padded: the means published for the inverse (SparseLists::x_mean) must be this call's.
    st = CheckInputsChangeBetweenCalls(v, WithGeometry({2, 5, 7, 37, 29, 6, 5}, 3, 1, 4, 0, 1, 1));
    EXPECT_TRUE(st.ok()) << v << " padded: " << st;
  }
}

TEST(FftFusedTest, BenchmarkShapesWorstRatio) {
  std::vector<Shape> shapes = KernelBotBenchmarkShapes();
  shapes.erase(shapes.begin() + 3);  // the fourth case repeats the third
  for (const char* v : kVariants) {
    for (const Shape& s : shapes) {
      if (Refused(v, s)) continue;
      absl::StatusOr<Plan> plan = Plan::Create(s, v);
      ASSERT_TRUE(plan.ok()) << plan.status();
      std::printf("%s %s config %s workspace %.1f MiB\n", v, s.ToString().c_str(),
                  ConfigName(s, VariantOptions(v)).c_str(), plan->workspace_bytes() / 1048576.0);
      EXPECT_LE(plan->workspace_bytes(), fft_tiled::kTargetWorkspaceBytes) << s.ToString();
      double worst = 0;
      // Five seeds of KernelBot's input distribution (randn-like).
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        absl::StatusOr<Comparison> c =
            CheckAgainstReference(s, v, seed, 4096, Distribution::kNormal);
        ASSERT_TRUE(c.ok()) << c.status();
        Print(v, s, seed, *c);
        EXPECT_TRUE(c->ok()) << v << " " << s.ToString() << " " << c->ToString();
        worst = std::max(worst, c->worst_ratio);
      }
      std::printf("%s %s worst_ratio %.4f over 5 seeds (normal inputs)\n", v,
                  s.ToString().c_str(), worst);
      EXPECT_LE(worst, kBenchmarkRatioLimit) << v << " " << s.ToString();
    }
  }
}

// Not a pass/fail check: the measured time of each step next to the model's prediction, and the
// same for a few other pair counts (the default is a guess), for the next calibration.
TEST(FftFusedTest, StageTimesAgainstTheModel) {
  std::vector<Shape> shapes = KernelBotBenchmarkShapes();
  shapes.erase(shapes.begin() + 3);
  std::printf("%-28s %-10s %17s %17s %17s %17s %17s\n", "shape", "config", "filter ms",
              "input ms", "mix ms", "inverse ms", "run ms");
  std::printf("%-28s %-10s %17s %17s %17s %17s %17s\n", "", "", "meas / model",
              "meas / model", "meas / model", "meas / model", "meas / model");
  for (const Shape& s : shapes) {
    for (int pairs : {0, 1, 2, 4, 8, -1}) {
      Options o;
      o.pairs_per_cta = std::max(pairs, 0);
      o.gemm_3xtf32 = pairs < 0;  // the default pair count with the tensor-core mix
      if (!ChooseConfig(s, o).ok()) continue;
      absl::StatusOr<StageTimes> t = TimeStages(s, o, 20);
      ASSERT_TRUE(t.ok()) << s.ToString() << ": " << t.status();
      const Cost& m = t->config.cost;
      std::printf("%-28s %-10s %8.4f / %6.4f %8.4f / %6.4f %8.4f / %6.4f %8.4f / %6.4f %8.4f / %6.4f\n",
                  s.ToString().c_str(), ConfigName(s, o).c_str(), t->seconds[kFilterStage] * 1e3,
                  m.filter_seconds * 1e3, t->seconds[kInputStage] * 1e3, m.input_seconds * 1e3,
                  t->seconds[kMixStage] * 1e3, m.gemm_seconds * 1e3,
                  t->seconds[kInverseStage] * 1e3, m.inverse_seconds * 1e3,
                  t->total_seconds * 1e3, m.seconds * 1e3);
    }
  }
}

}  // namespace
}  // namespace fft_fused
}  // namespace conv2d
