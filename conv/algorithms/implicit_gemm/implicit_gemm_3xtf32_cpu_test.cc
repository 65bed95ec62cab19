// implicit_gemm_3xtf32 without a GPU: the kernel's index arithmetic (the same functions, compiled
// for the host) replayed block by block -- every thread's gathers into a shared-memory stage,
// every lane's fragment loads, an mma emulated from the PTX ISA's fragment tables (coded here
// independently of the kernel's helpers), the epilogue's stores -- in exact double arithmetic and
// compared with the fp64 reference. Plus the shape limits, the bank-conflict claims and the
// accuracy model behind the blocked accumulation (FastDiv is tested in conv/arch).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_testing.h"
#include "conv/testing/cpu_replay/tf32_model.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace implicit_gemm_3xtf32_internal {
namespace {

using namespace implicit_gemm_testing;  // NOLINT: the family's shared test helpers

// ---- The PTX ISA's fragment tables for mma.m16n8k8 with .tf32 (written out again here, so that
// the kernel's AFragIndex/BFragIndex/CFragCoord are checked against them, not against themselves).
int PtxARow(int lane, int i) { return lane / 4 + ((i == 1 || i == 3) ? 8 : 0); }
int PtxACol(int lane, int i) { return lane % 4 + (i >= 2 ? 4 : 0); }
int PtxBRow(int lane, int i) { return lane % 4 + (i == 1 ? 4 : 0); }  // k
int PtxBCol(int lane, int) { return lane / 4; }                      // n
int PtxCRow(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
int PtxCCol(int lane, int i) { return 2 * (lane % 4) + (i & 1); }

// d[lane][i] += A * B, the lanes' registers placed by the PTX tables.
void EmulateMma(double (&d)[32][4], const double (&a)[32][4], const double (&b)[32][2]) {
  double am[16][8], bm[8][8];
  int seen_a[16][8] = {}, seen_b[8][8] = {}, seen_c[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      am[PtxARow(lane, i)][PtxACol(lane, i)] = a[lane][i];
      ++seen_a[PtxARow(lane, i)][PtxACol(lane, i)];
      ++seen_c[PtxCRow(lane, i)][PtxCCol(lane, i)];
    }
    for (int i = 0; i < 2; ++i) {
      bm[PtxBRow(lane, i)][PtxBCol(lane, i)] = b[lane][i];
      ++seen_b[PtxBRow(lane, i)][PtxBCol(lane, i)];
    }
  }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      ASSERT_EQ(seen_a[r][c], 1);
      ASSERT_EQ(seen_c[r][c], 1);
      if (r < 8) {
        ASSERT_EQ(seen_b[r][c], 1);
      }
    }
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const int r = PtxCRow(lane, i), c = PtxCCol(lane, i);
      double s = 0;
      for (int k = 0; k < 8; ++k) s += am[r][k] * bm[k][c];
      d[lane][i] += s;
    }
  }
}

// One block tile replayed thread by thread, with no pipelining (which only reorders when a stage
// is filled, not what it holds). Writes into y (NaN-initialised) and counts writes per element.
template <bool kVecA, bool kVecB>
void EmulateTile(const Shape& s, const Params& p, int tile, const std::vector<float>& x,
                 const std::vector<float>& w, std::vector<double>& y, std::vector<int>& writes) {
  const int m_tile = tile / p.n_tiles, n_tile = tile % p.n_tiles;
  const int m0 = m_tile * kBM, n0 = n_tile * kBN;
  std::vector<AGather<kVecA>> ag(kThreads);
  std::vector<BGather<kVecB>> bg(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    ag[t].Init(p, m0, t);
    bg[t].Init(p, n0, t);
  }
  // acc[warp][mi][ni][lane][reg]
  std::vector<double> acc(kThreads / 32 * kMmaTilesM * kMmaTilesN * 32 * 4, 0.0);
  auto acc_at = [&](int warp, int mi, int ni) {
    return reinterpret_cast<double(*)[4]>(
        &acc[(((warp * kMmaTilesM + mi) * kMmaTilesN + ni) * 32) * 4]);
  };
  std::vector<float> stage(kStageFloats);
  std::vector<int> stage_writes(kStageFloats);
  constexpr int kWA = kVecA ? 4 : 1, kWB = kVecB ? 4 : 1;
  for (int kt = 0; kt < p.k_tiles; ++kt) {
    std::fill(stage.begin(), stage.end(), std::numeric_limits<float>::quiet_NaN());
    std::fill(stage_writes.begin(), stage_writes.end(), 0);
    for (int t = 0; t < kThreads; ++t) {
      ag[t].ForEach(p, kt, [&](int si, int g, bool valid) {
        ReplayAGatherCopy(p, kt, m0, kBM, kBK, kAStride, kWA, x, si, g, valid,
                          [&](int sj, float v) {
                            stage[sj] = v;
                            ++stage_writes[sj];
                          });
      });
      bg[t].ForEach(p, kt, [&](int si, int g, bool valid) {
        ASSERT_EQ(si % kWB, 0);
        ASSERT_EQ(g % kWB, 0) << "16-byte gather from an unaligned w offset";
        for (int j = 0; j < kWB; ++j) {
          const int sj = si + j;
          ASSERT_TRUE(sj >= 0 && sj < kBStageFloats);
          ASSERT_LT(sj % kBStride, kBK) << "write into the padding";
          if (valid) {
            const int n = n0 + sj / kBStride, k = kt * kBK + sj % kBStride;
            ASSERT_LT(n, p.cout);
            ASSERT_LT(k, p.k);
            ASSERT_EQ(g + j, n * p.k + k);
          } else {
            ASSERT_EQ(g, 0);
          }
          stage[kAStageFloats + sj] = valid ? w[g + j] : 0.f;
          ++stage_writes[kAStageFloats + sj];
        }
      });
    }
    if (::testing::Test::HasFatalFailure()) return;
    // Every non-padding word of the stage written exactly once.
    for (int i = 0; i < kStageFloats; ++i) {
      const bool pad = i < kAStageFloats ? (i % kAStride) >= kBM
                                         : ((i - kAStageFloats) % kBStride) >= kBK;
      ASSERT_EQ(stage_writes[i], pad ? 0 : 1) << "stage word " << i;
    }
    // The warps' fragment loads and mma.
    for (int warp = 0; warp < kThreads / 32; ++warp) {
      const int wm0 = WarpM0(warp), wn0 = WarpN0(warp);
      for (int kk = 0; kk < kBK; kk += 8) {
        for (int mi = 0; mi < kMmaTilesM; ++mi) {
          double a[32][4];
          for (int lane = 0; lane < 32; ++lane)
            for (int r = 0; r < 4; ++r) a[lane][r] = stage[AFragIndex(wm0, mi, kk, lane, r)];
          for (int ni = 0; ni < kMmaTilesN; ++ni) {
            double b[32][2];
            for (int lane = 0; lane < 32; ++lane)
              for (int r = 0; r < 2; ++r)
                b[lane][r] = stage[kAStageFloats + BFragIndex(wn0, ni, kk, lane, r)];
            double(&d)[32][4] = *reinterpret_cast<double(*)[32][4]>(acc_at(warp, mi, ni));
            EmulateMma(d, a, b);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
  // Epilogue.
  for (int warp = 0; warp < kThreads / 32; ++warp) {
    for (int mi = 0; mi < kMmaTilesM; ++mi)
      for (int ni = 0; ni < kMmaTilesN; ++ni)
        for (int lane = 0; lane < 32; ++lane)
          for (int r = 0; r < 4; ++r) {
            int ml, nl;
            CFragCoord(WarpM0(warp), WarpN0(warp), mi, ni, lane, r, &ml, &nl);
            const int m = m0 + ml, n = n0 + nl;
            if (m >= p.m || n >= p.cout) continue;
            const int64_t at = YRowBase(p, m) + int64_t{n} * p.p;
            ASSERT_TRUE(at >= 0 && at < s.output_elements());
            y[at] = acc_at(warp, mi, ni)[lane][r];
            ++writes[at];
          }
  }
}

template <bool kVecA, bool kVecB>
void CheckShape(const Shape& s, uint64_t seed) {
  SCOPED_TRACE(s.ToString() + (kVecA ? " vecA" : " scalarA") + (kVecB ? " vecB" : " scalarB"));
  ASSERT_TRUE(CheckIndexing(s).ok());
  const Params p = MakeParams(s);
  if (kVecA) {
    ASSERT_TRUE(CanVectorizeA(p, 0));
  }
  if (kVecB) {
    ASSERT_TRUE(CanVectorizeB(p, 0));
  }
  const std::vector<float> x = RandomTensor(seed, kInputTensor, s.input_elements());
  const std::vector<float> w = RandomTensor(seed, kFilterTensor, s.filter_elements());
  std::vector<double> y(s.output_elements(), std::numeric_limits<double>::quiet_NaN());
  std::vector<int> writes(s.output_elements(), 0);
  const int64_t tiles = NumTiles(s);
  for (int tile = 0; tile < tiles; ++tile) {
    EmulateTile<kVecA, kVecB>(s, p, tile, x, w, y, writes);
    if (::testing::Test::HasFatalFailure()) return;
  }
  const std::vector<double> ref = ReferenceConv(s, x.data(), w.data());
  int64_t bad = 0;
  for (int64_t i = 0; i < s.output_elements(); ++i) {
    ASSERT_EQ(writes[i], 1) << "output " << i << " written " << writes[i] << " times";
    // Exact products summed in double in another order: agreement to ~1e-15 relative.
    if (!(std::abs(y[i] - ref[i]) <= 1e-9 * (1 + std::abs(ref[i]))) && bad++ < 5) {
      ADD_FAILURE() << "output " << i << ": emulated " << y[i] << " reference " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0);
}

// Keep the replay fast: the shapes whose padded GEMM is small.
std::vector<Shape> EmulatedShapes() {
  return ReplayShapes({Shape{1, 64, 64, 8, 8, 1, 1}}, [](const Shape& s) {
    return static_cast<double>(NumTiles(s)) * kBM * kBN * (s.in_channels * s.kernel_h * s.kernel_w);
  }, 3e8);
}

TEST(ImplicitGemm3xTf32EmulationTest, ScalarGathersMatchReference) {
  for (const Shape& s : EmulatedShapes()) CheckShape<false, false>(s, 7);
}

TEST(ImplicitGemm3xTf32EmulationTest, VectorGathersMatchReference) {
  int covered_a = 0, covered_b = 0;
  for (const Shape& s : EmulatedShapes()) {
    const Params p = MakeParams(s);
    const bool va = CanVectorizeA(p, 0), vb = CanVectorizeB(p, 0);
    if (va && vb) CheckShape<true, true>(s, 8);
    if (va) CheckShape<true, false>(s, 9);
    if (vb) CheckShape<false, true>(s, 10);
    covered_a += va;
    covered_b += vb;
  }
  EXPECT_GE(covered_a, 2);
  EXPECT_GE(covered_b, 4);
}

TEST(ImplicitGemm3xTf32EmulationTest, VectorGathersNeedAlignment) {
  const Params p = MakeParams(Shape{1, 8, 8, 16, 16, 1, 1});
  EXPECT_TRUE(CanVectorizeA(p, 256));
  EXPECT_FALSE(CanVectorizeA(p, 260));
  EXPECT_TRUE(CanVectorizeB(p, 256));
  EXPECT_FALSE(CanVectorizeB(p, 264));
  EXPECT_FALSE(CanVectorizeA(MakeParams(Shape{1, 8, 8, 16, 18, 1, 1}), 0));  // W % 4 != 0
  EXPECT_FALSE(CanVectorizeA(MakeParams(Shape{1, 8, 8, 16, 16, 1, 2}), 0));  // Kw != 1
  EXPECT_FALSE(CanVectorizeB(MakeParams(Shape{1, 3, 8, 16, 16, 1, 1}), 0));  // K = 3
}

// Every fragment load of a warp reads 32 distinct banks, in every stage.
TEST(ImplicitGemm3xTf32EmulationTest, FragmentLoadsAreBankConflictFree) {
  for (int stage = 0; stage < kStages; ++stage) {
    for (int warp = 0; warp < kThreads / 32; ++warp) {
      for (int kk = 0; kk < kBK; kk += 8) {
        for (int mi = 0; mi < kMmaTilesM; ++mi)
          for (int r = 0; r < 4; ++r) {
            unsigned banks = 0;
            for (int lane = 0; lane < 32; ++lane)
              banks |= 1u << ((stage * kStageFloats + AFragIndex(WarpM0(warp), mi, kk, lane, r)) % 32);
            EXPECT_EQ(banks, 0xFFFFFFFFu) << "A warp " << warp << " mi " << mi << " reg " << r;
          }
        for (int ni = 0; ni < kMmaTilesN; ++ni)
          for (int r = 0; r < 2; ++r) {
            unsigned banks = 0;
            for (int lane = 0; lane < 32; ++lane)
              banks |= 1u << ((stage * kStageFloats + kAStageFloats +
                               BFragIndex(WarpN0(warp), ni, kk, lane, r)) % 32);
            EXPECT_EQ(banks, 0xFFFFFFFFu) << "B warp " << warp << " ni " << ni << " reg " << r;
          }
      }
    }
  }
}

TEST(ImplicitGemm3xTf32PlanTest, ShapeLimits) { ExpectCommonShapeLimits("implicit_gemm_3xtf32"); }

// ---- The accuracy model of the blocked accumulation (the argument at the top of the .cu file;
// SplitDotModel in conv/testing/cpu_replay/tf32_model.h), on dot products of U(-1, 1) inputs.
DotModelError Model(int k, int fold_terms, int samples, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(k) * samples), w(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = u(rng);
    w[i] = u(rng);
  }
  return SplitDotModel(x.data(), w.data(), k, samples, fold_terms);
}

TEST(ImplicitGemm3xTf32AccuracyModel, BlockedAccumulationMeetsTheBar) {
  constexpr int kFoldTerms = kFoldTiles * kBK;
  // The longest KernelBot reduction (128 channels, 32x32) and the longest "cnn" one (512, 3x3).
  for (int k : {131072, 4608}) {
    const int samples = k > 10000 ? 48 : 400;
    const DotModelError folded = Model(k, kFoldTerms, samples, 1);
    const DotModelError unfolded = Model(k, 1 << 30, samples, 1);
    std::printf("K=%-7d fold every %d: rms %.3e worst %.3e | one accumulator: rms %.3e worst %.3e\n",
                k, kFoldTerms, folded.rms, folded.worst, unfolded.rms, unfolded.worst);
    // Outputs near zero get the tightest tolerance, 1e-3: the folded error must stay well under
    // it (4 sigma of the rms), and the single accumulator must be shown to need the folding.
    EXPECT_LT(4 * folded.rms, 1e-3) << "K=" << k;
    EXPECT_LT(folded.worst, 1e-3) << "K=" << k;
    EXPECT_GT(unfolded.rms, 4 * folded.rms) << "K=" << k;
  }
}

}  // namespace
}  // namespace implicit_gemm_3xtf32_internal
}  // namespace conv2d
