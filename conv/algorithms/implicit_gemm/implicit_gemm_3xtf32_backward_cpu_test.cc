// implicit_gemm_3xtf32's backward without a GPU: DgradOp's and WgradOp's gathers, k-tile ranges,
// A() (wgrad's centring) and epilogue maps (the functions the kernel runs, compiled for the host)
// replayed block by block and slice by slice in double, wgrad's partials summed by WgradSumAt as
// the reduction kernel does, and compared with the fp64 reference (reference::Reference). The
// mainloop's fragment maps and mma are the forward's, op-independent, and replayed by
// implicit_gemm_3xtf32_cpu_test; here each stage's product is taken directly. Mutants (a dgrad
// gather with the wrong phase, a wgrad split that drops a slice or leaves gaps) must fail.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32_backward.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32_backward_testing.h"
#include "conv/core/registry.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "conv/testing/cpu_replay/tf32_model.h"
#include "reference/input_classes.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace implicit_gemm_3xtf32_internal {
namespace {

using namespace implicit_gemm_3xtf32_backward_testing;  // NOLINT: the shared case list

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Every tile (and slice) of operation Op replayed: each thread's copies into a stage, checked
// to land once on every non-padding word and to read inside the source; the stage's product in
// double; the epilogue's stores into `out` (its size that of C's destination: dx, dw, or the
// slices' partials), counted in `writes`.
template <class Op>
void ReplayGemm(const Params& p, const std::vector<float>& a_src, const std::vector<float>& b_src,
                std::vector<double>& out, std::vector<int>& writes) {
  const int tiles = ((p.m + kBM - 1) / kBM) * p.n_tiles;
  std::vector<float> stage(kStageFloats);
  std::vector<int> stage_writes(kStageFloats);
  std::vector<double> acc(kBM * kBN);
  std::vector<Op> ops(kThreads);
  for (int slice = 0; slice < p.slices; ++slice) {
    for (int tile = 0; tile < tiles; ++tile) {
      const int m_tile = tile / p.n_tiles, n_tile = tile % p.n_tiles;
      for (int t = 0; t < kThreads; ++t) ops[t].Init(p, m_tile, n_tile, slice, t);
      const Op& op = ops[0];
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int kt = op.KBegin(p); kt < op.KEnd(p); ++kt) {
        std::fill(stage_writes.begin(), stage_writes.end(), 0);
        for (int t = 0; t < kThreads; ++t) {
          auto put = [&](int base, const std::vector<float>* src_ptr) {
            return [&, base, src_ptr](int si, int g, bool valid) {
              const std::vector<float>& src = *src_ptr;
              ASSERT_TRUE(si >= 0 && base + si < kStageFloats);
              if (valid) {
                ASSERT_TRUE(g >= 0 && g < static_cast<int64_t>(src.size())) << g;
              } else {
                ASSERT_EQ(g, 0);
              }
              stage[base + si] = valid ? src[g] : 0.f;
              ++stage_writes[base + si];
            };
          };
          ops[t].ForEachA(p, kt, put(0, &a_src));
          ops[t].ForEachB(p, kt, put(kAStageFloats, &b_src));
          if (::testing::Test::HasFatalFailure()) return;
        }
        for (int i = 0; i < kStageFloats; ++i) {
          const bool pad = i < kAStageFloats ? (i % kAStride) >= kBM
                                             : ((i - kAStageFloats) % kBStride) >= kBK;
          ASSERT_EQ(stage_writes[i], pad ? 0 : 1) << "stage word " << i;
        }
        // A as the mma takes it: op.A() of the thread whose fragment register reads the row
        // (wgrad's centring; the other operations' A() is the identity).
        for (int m = 0; m < kBM; ++m) {
          const int warp = m / kWarpM, r = m % kWarpM, mi = r / 16, h = (r % 16) / 8;
          const int lane = 4 * (r % 8);
          ASSERT_EQ(AFragIndex(WarpM0(warp), mi, 0, lane, h), m);
          for (int k = 0; k < kBK; ++k) {
            float& v = stage[k * kAStride + m];
            v = ops[32 * warp + lane].A(v, mi, h);
          }
        }
        for (int m = 0; m < kBM; ++m)
          for (int n = 0; n < kBN; ++n) {
            double s = 0;
            for (int k = 0; k < kBK; ++k) {
              s += double{stage[k * kAStride + m]} * stage[kAStageFloats + n * kBStride + k];
            }
            acc[m * kBN + n] += s;
          }
      }
      for (int m = 0; m < kBM; ++m) {
        const int row = op.RowBase(p, op.m0 + m);
        for (int n = 0; n < kBN; ++n) {
          if (row < 0 || op.n0 + n >= op.NLimit(p)) continue;
          const int64_t at = row + int64_t{op.n0 + n} * op.ColStride(p);
          ASSERT_TRUE(at >= 0 && at < static_cast<int64_t>(out.size())) << at;
          out[at] = acc[m * kBN + n];
          ++writes[at];
        }
      }
    }
  }
}

// dx or dw as the kernels compute it with parameters p (MakeParams(s), or a mutant), in double
// up to wgrad's final rounding to float; `once` says whether every element was written once
// (once per slice into the partials).
std::vector<double> Replay(const Shape& s, const Params& p, const ReplayInputs& in,
                           bool* once) {
  std::vector<double> out;
  std::vector<int> writes;
  int expected_writes = 1;
  if (s.op == Op::kDgrad) {
    out.assign(s.input_elements(), kNaN);
    writes.assign(out.size(), 0);
    ReplayGemm<DgradOp>(p, in.dy, in.w, out, writes);
  } else {
    const int64_t n = s.filter_elements();
    out.assign(p.slices * n, kNaN);
    writes.assign(out.size(), 0);
    if (p.centers != nullptr) {
      ReplayGemm<WgradOp<true>>(p, in.x, in.dy, out, writes);
    } else {
      ReplayGemm<WgradOp<false>>(p, in.x, in.dy, out, writes);
    }
    if (p.slices > 1 || p.centers != nullptr) {  // the reduction kernel: WgradSumAt
      std::vector<double> dw(n);
      for (int64_t e = 0; e < n; ++e) dw[e] = WgradSumAt(p, out.data(), e, n);
      out.swap(dw);
      std::vector<int> per(n, 0);
      for (int64_t i = 0; i < static_cast<int64_t>(writes.size()); ++i) per[i % n] += writes[i];
      writes.swap(per);
      expected_writes = p.slices;
    }
  }
  *once = std::all_of(writes.begin(), writes.end(),
                      [&](int w) { return w == expected_writes; });
  return out;
}

double Work(const Shape& s) {
  const Params p = MakeParams(s);
  return double{kBM} * kBN * kBK * ((p.m + kBM - 1) / kBM) * p.n_tiles * p.k_tiles;
}

void CheckOp(Op op) {
  int checked = 0, split = 0;
  for (const Shape& base : BackwardShapes()) {
    const Shape s = AsOp(base, op);
    SCOPED_TRACE(s.ToString());
    ASSERT_TRUE(ValidateShape(s).ok());
    ASSERT_TRUE(CheckIndexing(s).ok());
    if (Work(s) > 2e8) continue;
    const Params p = MakeParams(s);
    const ReplayInputs in = MakeReplayInputs(s, 21);
    bool once = false;
    const std::vector<double> got = Replay(s, p, in, &once);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_TRUE(once) << "an element written other than once (per slice)";
    EXPECT_EQ(ReplayMismatches(s, got, in), 0);
    ++checked;
    split += p.slices > 1;
  }
  EXPECT_GE(checked, 20);
  if (op == Op::kWgrad) {
    EXPECT_GE(split, 5) << "too few shapes exercise the split";
  }
}

TEST(ImplicitGemm3xTf32BackwardReplay, DgradMatchesReference) { CheckOp(Op::kDgrad); }
TEST(ImplicitGemm3xTf32BackwardReplay, WgradMatchesReference) { CheckOp(Op::kWgrad); }

// Splits other than ChooseSplitK's (uneven last slice, one slice per k-tile) sum to the same.
TEST(ImplicitGemm3xTf32BackwardReplay, WgradAnySplitMatchesReference) {
  const Shape s = AsOp(WithGeometry({2, 9, 6, 33, 28, 5, 3}, 2, 1, 0, 3, 2, 3, 2, 1, 3), Op::kWgrad);
  const ReplayInputs in = MakeReplayInputs(s, 5);
  for (int slice_tiles : {1, 3, 7, 1000}) {
    Params p = MakeParams(s);
    p.slice_tiles = slice_tiles;
    p.slices = (p.k_tiles + slice_tiles - 1) / slice_tiles;
    bool once = false;
    const std::vector<double> got = Replay(s, p, in, &once);
    EXPECT_TRUE(once) << slice_tiles;
    EXPECT_EQ(ReplayMismatches(s, got, in), 0) << slice_tiles;
  }
}

// wgrad's centring (WgradCenter): x of large mean, each channel's centre from image 0 as
// CentersKernel takes it, dy's channel sums as ChannelSums's (one run): the replay (the centre
// subtracted by the thread whose fragment reads the row, padding included; WgradSumAt's
// correction) equals the uncentred reference, on the shared shapes (groups, strides, padding,
// dilation); without the correction it does not.
TEST(ImplicitGemm3xTf32BackwardReplay, WgradCentredMatchesReference) {
  int checked = 0;
  for (const Shape& base : BackwardShapes()) {
    const Shape s = AsOp(base, Op::kWgrad);
    SCOPED_TRACE(s.ToString());
    if (Work(s) > 5e7) continue;
    ReplayInputs in = MakeReplayInputs(s, 23);
    for (float& v : in.x) v = std::abs(v) + 10.f;  // ReLU-like, mean 10.8: centred
    ReplayCentring centring = CentringOf(s, in);
    for (float c : centring.centers) ASSERT_NE(c, 0.f);
    Params p = MakeParams(s);
    p.centers = centring.centers.data();
    p.dy_sums = centring.dy_sums.data();
    p.dy_runs = 1;
    bool once = false;
    EXPECT_EQ(ReplayMismatches(s, Replay(s, p, in, &once), in), 0);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<double> zeros(s.out_channels, 0.0);
    p.dy_sums = zeros.data();  // the mutant: the centre taken out and never added back
    EXPECT_GT(ReplayMismatches(s, Replay(s, p, in, &once), in), 0);
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// Each mutant must be caught by the replay: the checks above have teeth.
TEST(ImplicitGemm3xTf32BackwardReplay, MutantsFail) {
  const Shape dgrad = AsOp(WithGeometry({1, 5, 3, 20, 17, 3, 3}, 1, 1, 1, 1, 2, 2), Op::kDgrad);
  const ReplayInputs din = MakeReplayInputs(dgrad, 3);
  bool once = false;
  {
    Params p = MakeParams(dgrad);  // the wrong stride phase: rows tested against pt + 1
    ++p.pt;
    EXPECT_GT(ReplayMismatches(dgrad, Replay(dgrad, p, din, &once), din), 0);
  }
  {
    Params p = MakeParams(dgrad);  // the phase test dropped: every tap taken
    p.div_sh = FastDiv(1);
    p.sh = 1;
    EXPECT_GT(ReplayMismatches(dgrad, Replay(dgrad, p, din, &once), din), 0);
  }
  const Shape wgrad = AsOp(Shape{2, 3, 16, 33, 31, 3, 3}, Op::kWgrad);
  const ReplayInputs win = MakeReplayInputs(wgrad, 4);
  const Params good = MakeParams(wgrad);
  ASSERT_GT(good.slices, 2);
  {
    Params p = good;  // the last slice dropped
    --p.slices;
    EXPECT_GT(ReplayMismatches(wgrad, Replay(wgrad, p, win, &once), win), 0);
  }
  {
    Params p = good;  // slices one k-tile short: the last k-tiles summed by none
    --p.slice_tiles;
    EXPECT_GT(ReplayMismatches(wgrad, Replay(wgrad, p, win, &once), win), 0);
  }
}

// The split is a function of the shape: about two waves of 2 x 132 CTAs on ResNet-50's 56x56
// layer, slices within the contract's length, the workspace cap enforced.
TEST(ImplicitGemm3xTf32BackwardPlan, SplitK) {
  const Shape s = Resnet64(Op::kWgrad);
  absl::StatusOr<SplitK> split = ChooseSplitK(s);
  ASSERT_TRUE(split.ok()) << split.status();
  const int64_t ctas = NumTiles(s) * split->slices;
  EXPECT_GE(ctas, kTargetCtas / 2);
  EXPECT_LE(ctas, 2 * kTargetCtas);
  EXPECT_LE(split->slice_tiles * kBK, kMaxContractReduction);
  const int64_t k_tiles = (DimsOf(s).k + kBK - 1) / kBK;
  EXPECT_GE(int64_t{split->slices} * split->slice_tiles, k_tiles);
  EXPECT_LT(int64_t{split->slices - 1} * split->slice_tiles, k_tiles);
  EXPECT_LE(WgradWorkspaceBytes(s, *split), static_cast<size_t>(kMaxWorkspaceBytes));
  // 2048 x 2048 x 3 x 3 filters: 22 slices of 151 MB at the least.
  const Shape big = AsOp(WithGeometry({32, 2048, 2048, 56, 56, 3, 3}, 1, 1, 1, 1, 1, 1), Op::kWgrad);
  EXPECT_EQ(ChooseSplitK(big).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ImplicitGemm3xTf32BackwardPlan, Proposals) {
  const Algorithm* a = Registry::Global().Find("implicit_gemm_3xtf32");
  ASSERT_NE(a, nullptr);
  for (Op op : {Op::kDgrad, Op::kWgrad}) {
    EXPECT_TRUE(a->Computes(op));
    for (const Shape& base : BackwardShapes()) {
      const Shape s = AsOp(base, op);
      EXPECT_TRUE(a->CanImplement(s).ok()) << s.ToString() << ": " << a->CanImplement(s);
    }
    const Shape r = Resnet64(op);
    EXPECT_TRUE(a->WithinContract(r).ok()) << r.ToString();
    const double t = a->EstimateSeconds(r);
    EXPECT_TRUE(std::isfinite(t) && t > 0) << r.ToString();
  }
  // The forward kernel stays basic.
  EXPECT_EQ(a->CanImplement(GeometryShapes()[0]).code(), absl::StatusCode::kUnimplemented);
}

// A channel is centred only where its mean outweighs its spread (randn and ReLU-like data keep
// the plain GEMM and skip dy's channel sums); the centre keeps 8 significant bits; non-finite
// data are not centred.
TEST(WgradCenter, CentresOnlyWhereTheMeanOutweighsTheSpread) {
  EXPECT_EQ(wgrad_split::Center(0.0, 100.0, 100), 0.f);   // randn: mean 0, variance 1
  EXPECT_EQ(wgrad_split::Center(40.0, 50.0, 100), 0.f);   // ReLU of randn: mean 0.4, variance 0.34
  const float c = wgrad_split::Center(1080.0, 11700.0, 100);  // large mean: 10.8, variance 0.36
  EXPECT_NEAR(c, 10.8, 0.05);
  EXPECT_EQ(FloatBits(c) & 0x7fffu, 0u);
  EXPECT_EQ(wgrad_split::Center(std::numeric_limits<double>::quiet_NaN(), 1.0, 100), 0.f);
  EXPECT_EQ(wgrad_split::Center(std::numeric_limits<double>::infinity(), 1.0, 100), 0.f);
}

// wgrad's accumulation (WgradCenters, WgradFoldTiles) on the data that took 128-term and 32-term
// chunks past the bar on an H100 (rounds 97 and 98: ResNet's 64-channel 3x3 56x56 layer at
// batch 32, K = 100,352, large mean): 64 dw elements through the tf32 model (the pessimistic
// truncating mma, folds, slices in double), each element's absolute error against the exact
// sum. The kernel's accumulation (x centred, its chunk) must err at most a quarter of what
// uncentred 32-term chunks do, and stay far inside the bar.
TEST(WgradChunk, BoundsTheLargeMeanErrorAtResnetLength) {
  const Shape s = Resnet64(Op::kWgrad);
  const conv2d::Inputs in = MakeInputs(s, 9, InputClass::kLargeMean);
  const int64_t b_n = s.batch, c_n = s.in_channels, o_n = s.out_channels, h = s.height,
                w = s.width, k = b_n * h * w;
  ASSERT_TRUE(wgrad_split::Centres(k));
  const absl::StatusOr<SplitK> split = ChooseSplitK(s);
  ASSERT_TRUE(split.ok());
  const int64_t slice = int64_t{split->slice_tiles} * kBK;
  struct Accumulation {
    bool center;
    int fold_terms;
  };
  const Accumulation kinds[3] = {{true, WgradFoldTiles(k) * kBK},  // the kernel's
                                 {false, 32},                      // round 97's
                                 {false, kFoldTiles * kBK}};       // the forward's
  std::vector<float> a(k), b(k), ac(k);
  double sq[3] = {0, 0, 0}, worst_ratio = 0;
  uint64_t r = 12345;
  for (int e = 0; e < 64; ++e) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t o = (r >> 33) % o_n, c = (r >> 20) % c_n, p = (r >> 10) % 3, q = (r >> 5) % 3;
    double image0 = 0, image0_sq = 0;
    for (int64_t i = 0; i < h * w; ++i) {
      image0 += in.x[c * h * w + i];
      image0_sq += static_cast<double>(in.x[c * h * w + i]) * in.x[c * h * w + i];
    }
    const float center = wgrad_split::Center(image0, image0_sq, static_cast<int>(h * w));
    ASSERT_NE(center, 0.f) << "large-mean data are centred";
    double exact = 0, dy_sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t bi = i / (h * w), y = i / w % h, x = i % w, xy = y + p - 1, xx = x + q - 1;
      a[i] = xy >= 0 && xy < h && xx >= 0 && xx < w ? in.x[((bi * c_n + c) * h + xy) * w + xx]
                                                   : 0.f;
      ac[i] = a[i] - center;  // padding too: the kernel's A() takes every element
      b[i] = in.dy[((bi * o_n + o) * h + y) * w + x];
      exact += static_cast<double>(a[i]) * b[i];
      dy_sum += b[i];
    }
    for (int f = 0; f < 3; ++f) {
      const std::vector<float>& af = kinds[f].center ? ac : a;
      double sum = kinds[f].center ? static_cast<double>(center) * dy_sum : 0.0;
      for (int64_t k0 = 0; k0 < k; k0 += slice) {
        const int len = static_cast<int>(std::min(slice, k - k0));
        // One slice through the model: its exact part and the model's error on it.
        double part = 0;
        for (int i = 0; i < len; ++i) part += static_cast<double>(af[k0 + i]) * b[k0 + i];
        sum += part + SignedSplitDotError(&af[k0], &b[k0], len, kinds[f].fold_terms);
      }
      const double err = std::abs(static_cast<double>(static_cast<float>(sum)) - exact);
      sq[f] += err * err;
      if (f == 0) worst_ratio = std::max(worst_ratio, err / (1e-3 + 1e-3 * std::abs(exact)));
    }
  }
  const double rms[3] = {std::sqrt(sq[0] / 64), std::sqrt(sq[1] / 64), std::sqrt(sq[2] / 64)};
  std::printf("wgrad large-mean model rms: the kernel's %.3g, 32-term uncentred %.3g, 128-term "
              "uncentred %.3g; the kernel's worst %.3g of the bar\n",
              rms[0], rms[1], rms[2], worst_ratio);
  EXPECT_LT(rms[0], 0.25 * rms[1]) << "centred against round 97's 32-term chunks";
  EXPECT_LT(worst_ratio, 0.05);
}

}  // namespace
}  // namespace implicit_gemm_3xtf32_internal
}  // namespace conv2d
