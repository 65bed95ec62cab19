// implicit_gemm_wgmma's weight gradient without a GPU: the functions its kernel runs
// (implicit_gemm_wgmma_wgrad.h: SliceWalk, WgradAGather, WgradBGather, WgradRowCenter,
// WgradRowBase; the forward's AFragIndex and AccCoord) replayed CTA by CTA and unit by unit,
// each stage's product in double, the slices summed by wgrad_split::SumAt as the reduction
// kernel does, against the fp64 reference (reference::Reference). The fragment maps and the wgmma
// operand layouts are the forward's, replayed by implicit_gemm_wgmma_cpu_test. Mutants must fail.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32_backward_testing.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_internal.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_wgrad.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/conv.h"
#include "conv/core/device_info.h"
#include "conv/core/registry.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace implicit_gemm_wgmma_internal {
namespace {

using implicit_gemm_3xtf32_backward_testing::AsOp;
using implicit_gemm_3xtf32_backward_testing::CentringOf;
using implicit_gemm_3xtf32_backward_testing::BackwardShapes;
using implicit_gemm_3xtf32_backward_testing::MakeReplayInputs;
using implicit_gemm_3xtf32_backward_testing::ReplayCentring;
using implicit_gemm_3xtf32_backward_testing::ReplayInputs;
using implicit_gemm_3xtf32_backward_testing::ReplayMismatches;
using implicit_gemm_3xtf32_backward_testing::Resnet64;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// What the replay runs: the kernel's parameters, the split, and (centring) the centres and dy's
// channel sums the prologue kernels would compute (one run per channel).
struct Case {
  Params p;
  wgrad_split::SplitK split;
  wgrad_split::Sum sum;
  std::vector<float> centers;
  std::vector<double> dy_sums;
};
Case MakeCase(const Shape& s, int bn, int slots) {
  Case c;
  const absl::StatusOr<wgrad_split::SplitK> split = WgradSplitK(s, bn);
  EXPECT_TRUE(split.ok()) << split.status();
  c.split = split.ok() ? *split : wgrad_split::SplitK{};
  c.p = MakeWgradParams(s, bn, slots, c.split);
  c.sum = wgrad_split::SumOf(s, c.split);
  return c;
}
// Centres from image 0 and dy's channel sums, as the prologue kernels compute them.
void Centre(const Shape& s, const ReplayInputs& in, Case* c) {
  ReplayCentring centring = CentringOf(s, in);
  c->centers = std::move(centring.centers);
  c->dy_sums = std::move(centring.dy_sums);
  c->p.centers = c->centers.data();
  c->sum.centers = c->centers.data();
  c->sum.dy_sums = c->dy_sums.data();
  c->sum.dy_runs = 1;
}

// dw as the kernel computes it, in double up to the slices' sum's rounding to float. `once`:
// every element written once per slice. kVecB: dy in 16-byte chunks.
template <int BN, bool kVecB>
void Replay(const Shape& s, const Case& c, const ReplayInputs& in, bool* once,
            std::vector<double>* result) {
  const Params& p = c.p;
  const int64_t n = s.filter_elements();
  const bool partials = wgrad_split::WorkspaceBytes(s, c.split) > 0;
  std::vector<double>& out = *result;
  out.assign(partials ? c.split.slices * n : n, kNaN);
  std::vector<int> writes(out.size(), 0);
  std::vector<float> a(kAStageFloats), b(BN * kBK);
  std::vector<int> a_writes(kAStageFloats), b_writes(BN * kBK);
  std::vector<double> acc(kBM * BN);
  for (int cta = 0; cta < p.grid; ++cta) {
    SliceWalk walk(p, cta);
    WorkUnit wu;
    while (walk.Next(p, &wu)) {
      const NTile nt = NTileOf<true>(p, BN, wu.n_tile);
      std::fill(acc.begin(), acc.end(), 0.0);
      std::vector<WgradAGather> gathers(kCopyThreads);
      for (int t = 0; t < kCopyThreads; ++t) gathers[t].Init(p, wu.m_tile * kBM, t);
      for (int i = 0; i < wu.stages; ++i) {
        const int kt = wu.kt_begin + i;
        std::fill(a_writes.begin(), a_writes.end(), 0);
        std::fill(b_writes.begin(), b_writes.end(), 0);
        for (int t = 0; t < kCopyThreads; ++t) {
          gathers[t].ForEach(p, kt, [&](int si, int gx, bool valid) {
            ASSERT_TRUE(si >= 0 && si < kAStageFloats);
            if (valid) {
              ASSERT_TRUE(nt.x0 + gx >= 0 && nt.x0 + gx < s.input_elements()) << gx;
            } else {
              ASSERT_EQ(gx, 0);
            }
            a[si] = valid ? in.x[nt.x0 + gx] : 0.f;
            ++a_writes[si];
          });
          auto copy_b = [&](int words) {
            return [&, words](int, int off, int src, bool valid) {
              ASSERT_TRUE(off >= 0 && off + words <= BN * kBK);
              if (valid) {
                ASSERT_TRUE(src >= 0 && src + words <= s.output_elements()) << src;
                ASSERT_EQ((src % words), 0) << "a 16-byte copy's source is 16-byte aligned";
              } else {
                ASSERT_EQ(src, 0);
              }
              for (int e = 0; e < words; ++e) {
                b[off + e] = valid ? in.dy[src + e] : 0.f;
                ++b_writes[off + e];
              }
            };
          };
          constexpr int kV = kVecB ? 4 : 1;
          WgradBGather<BN, kV>::ForEach(p, nt.n0, nt.n_end, kt, t, copy_b(kV));
          if (::testing::Test::HasFatalFailure()) return;
        }
        for (int si = 0; si < kAStageFloats; ++si) {
          ASSERT_EQ(a_writes[si], si % kAStride < kBM ? 1 : 0) << "A stage word " << si;
        }
        for (int off = 0; off < BN * kBK; ++off) ASSERT_EQ(b_writes[off], 1) << "B word " << off;
        // The consumers' A: the centre of the row their fragment register reads (the kernel's
        // rows gid + 8h of warp 16-row band), subtracted before the split.
        for (int wg = 0; wg < 2; ++wg)
          for (int warp = 0; warp < 4; ++warp)
            for (int lane = 0; lane < 32; ++lane)
              for (int r = 0; r < 4; ++r) {
                if ((lane & 3) != 0 || (r & 2) != 0) continue;  // one thread and register a row
                const int ml = wg * kWarpgroupRows + warp * 16 + (lane >> 2) + 8 * (r & 1);
                ASSERT_EQ(AFragIndex(wg, warp, 0, lane, r), ml);
                if (p.centers == nullptr) continue;
                const float center = WgradRowCenter(p, wu.n_tile, wu.m_tile * kBM + ml);
                for (int k = 0; k < kBK; ++k) a[k * kAStride + ml] -= center;
              }
        for (int m = 0; m < kBM; ++m)
          for (int nl = 0; nl < BN; ++nl) {
            double sum = 0;
            for (int k = 0; k < kBK; ++k) {
              sum += double{a[k * kAStride + m]} * b[BTileOffset(nl, k)];
            }
            acc[m * BN + nl] += sum;
          }
      }
      // The epilogue: every consumer thread's accumulator registers (AccCoord) to dw's or the
      // slice's rows (WgradRowBase), channels below the tile's end.
      for (int tid = 0; tid < kConsumerThreads; ++tid) {
        const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
        for (int r = 0; r < BN / 2; ++r) {
          int ml, nl;
          AccCoord(wg, warp, lane, r, &ml, &nl);
          const int row = WgradRowBase(p, wu, wu.m_tile * kBM + ml);
          const int o = nt.n0 + nl;
          if (row < 0 || o >= nt.n_end) continue;
          const int64_t at = row + int64_t{o} * p.red;
          ASSERT_TRUE(at >= 0 && at < static_cast<int64_t>(out.size())) << at;
          out[at] = acc[ml * BN + nl];
          ++writes[at];
        }
      }
    }
  }
  int expected = 1;
  if (partials) {
    std::vector<double> dw(n);
    for (int64_t e = 0; e < n; ++e) dw[e] = wgrad_split::SumAt(c.sum, out.data(), e, n);
    out.swap(dw);
    std::vector<int> per(n, 0);
    for (size_t i = 0; i < writes.size(); ++i) per[i % n] += writes[i];
    writes.swap(per);
    expected = c.split.slices;
  }
  *once = std::all_of(writes.begin(), writes.end(), [&](int w) { return w == expected; });
}

std::vector<double> ReplayAt(const Shape& s, int bn, const Case& c, const ReplayInputs& in,
                             bool* once, bool vec_b = false) {
  std::vector<double> out;
  *once = false;
  switch (bn * 2 + vec_b) {
    case 256: Replay<128, false>(s, c, in, once, &out); break;
    case 257: Replay<128, true>(s, c, in, once, &out); break;
    case 128: Replay<64, false>(s, c, in, once, &out); break;
    case 129: Replay<64, true>(s, c, in, once, &out); break;
    case 65: Replay<32, true>(s, c, in, once, &out); break;
    default: Replay<32, false>(s, c, in, once, &out); break;
  }
  return out;
}

double Work(const Shape& s, int bn) {
  return double{kBM} * bn * kBK * WgradTiles(s, bn) *
         ((s.batch * s.out_h() * s.out_w() + kBK - 1) / kBK);
}

// Every shared backward shape (groups, depthwise, strides, padding, dilation, odd sizes, several
// M and N tiles), at its own BN and at the others, with grids of 1, 5 and 14 CTAs.
TEST(ImplicitGemmWgmmaWgradReplay, MatchesReference) {
  int checked = 0, split = 0, vec_checked = 0;
  for (const Shape& base : BackwardShapes()) {
    const Shape s = AsOp(base, Op::kWgrad);
    SCOPED_TRACE(s.ToString());
    ASSERT_TRUE(CheckWgradIndexing(s).ok());
    for (int bn : {ChooseBN(s), 32, 128}) {
      if (Work(s, bn) > 1e8) continue;
      for (int slots : {1, 5, 14}) {
        const Case c = MakeCase(s, bn, slots);
        const ReplayInputs in = MakeReplayInputs(s, 31);
        // dy by 16-byte chunks too where the kernel would take them (CanVectorizeDy).
        for (bool vec : {false, true}) {
          if (vec && !CanVectorizeDy(c.p, 0)) continue;
          bool once = false;
          const std::vector<double> got = ReplayAt(s, bn, c, in, &once, vec);
          if (::testing::Test::HasFatalFailure()) return;
          EXPECT_TRUE(once) << "bn " << bn << " slots " << slots << " vec " << vec;
          EXPECT_EQ(ReplayMismatches(s, got, in), 0)
              << "bn " << bn << " slots " << slots << " vec " << vec;
          ++checked;
          vec_checked += vec;
        }
        split += c.split.slices > 1;
      }
    }
  }
  EXPECT_GE(checked, 60);
  EXPECT_GE(split, 15) << "too few cases exercise the split";
  EXPECT_GE(vec_checked, 10) << "too few cases exercise the 16-byte dy copies";
}

// x of large mean, centred (the kernel's centring path, forced on shapes far shorter than
// wgrad_split::kCenterK): equals the uncentred reference; without the correction it does not.
TEST(ImplicitGemmWgmmaWgradReplay, CentredMatchesReference) {
  int checked = 0;
  for (const Shape& base : BackwardShapes()) {
    const Shape s = AsOp(base, Op::kWgrad);
    SCOPED_TRACE(s.ToString());
    const int bn = ChooseBN(s);
    if (Work(s, bn) > 3e7) continue;
    ReplayInputs in = MakeReplayInputs(s, 37);
    for (float& v : in.x) v = std::abs(v) + 10.f;  // ReLU-like, mean 10.8: centred
    Case c = MakeCase(s, bn, 5);
    Centre(s, in, &c);
    for (float center : c.centers) ASSERT_NE(center, 0.f);
    // The reduction pass runs whenever x is centred (WorkspaceBytes counts the partials then).
    if (wgrad_split::WorkspaceBytes(s, c.split) == 0) continue;
    bool once = false;
    EXPECT_EQ(ReplayMismatches(s, ReplayAt(s, bn, c, in, &once), in), 0);
    EXPECT_TRUE(once);
    std::vector<double> zeros(s.out_channels, 0.0);
    c.sum.dy_sums = zeros.data();  // the mutant: the centre taken out and never added back
    EXPECT_GT(ReplayMismatches(s, ReplayAt(s, bn, c, in, &once), in), 0);
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

// The swapped orientation: the kernel's replay on SwappedWgrad(s) with x and dy exchanged,
// transposed, is s's dw (against the fp64 reference of s), for the 1x1 shapes that allow it.
TEST(ImplicitGemmWgmmaWgradReplay, SwappedEqualsReference) {
  int checked = 0;
  for (const Shape& s : {AsOp(Shape{2, 3, 40, 9, 7, 1, 1}, Op::kWgrad),
                         AsOp(Shape{3, 16, 96, 12, 12, 1, 1}, Op::kWgrad),
                         AsOp(Shape{1, 24, 144, 20, 19, 1, 1}, Op::kWgrad),
                         AsOp(Shape{2, 64, 256, 8, 8, 1, 1}, Op::kWgrad)}) {
    SCOPED_TRACE(s.ToString());
    ASSERT_TRUE(CanSwapWgrad(s));
    const Shape t = SwappedWgrad(s);
    const ReplayInputs in = MakeReplayInputs(s, 41);
    ReplayInputs swapped = in;
    swapped.x = in.dy;
    swapped.dy = in.x;
    for (int bn : {ChooseBN(t), 32}) {
      const Case c = MakeCase(t, bn, 5);
      bool once = false;
      const std::vector<double> dw_t = ReplayAt(t, bn, c, swapped, &once);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_TRUE(once);
      std::vector<double> dw(dw_t.size());
      for (int64_t o = 0; o < s.out_channels; ++o)
        for (int64_t ci = 0; ci < s.in_channels; ++ci) {
          dw[o * s.in_channels + ci] = dw_t[ci * s.out_channels + o];
        }
      EXPECT_EQ(ReplayMismatches(s, dw, in), 0) << "bn " << bn;
      EXPECT_GT(ReplayMismatches(s, dw_t, in), 0) << "untransposed: the check has teeth";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8);
  EXPECT_FALSE(CanSwapWgrad(AsOp(WithGeometry({2, 4, 8, 9, 9, 1, 1}, 0, 0, 0, 0, 2, 2), Op::kWgrad)));
  EXPECT_FALSE(CanSwapWgrad(AsOp(Shape{2, 4, 8, 9, 9, 3, 3}, Op::kWgrad)));
}

// The replay's checks have teeth: a slice dropped, slices a k-tile short, a gather off by a
// padding row.
TEST(ImplicitGemmWgmmaWgradReplay, MutantsFail) {
  const Shape s = AsOp(WithGeometry({12, 9, 6, 33, 28, 5, 3}, 2, 1, 0, 3, 2, 3, 2, 1, 3),
                       Op::kWgrad);
  const ReplayInputs in = MakeReplayInputs(s, 5);
  const int bn = ChooseBN(s);
  const Case good = MakeCase(s, bn, 7);
  ASSERT_GT(good.split.slices, 2);
  bool once = false;
  EXPECT_EQ(ReplayMismatches(s, ReplayAt(s, bn, good, in, &once), in), 0);
  {
    Case c = good;  // the last slice's units never walked
    c.p.units -= c.p.tiles;
    EXPECT_GT(ReplayMismatches(s, ReplayAt(s, bn, c, in, &once), in), 0);
  }
  {
    Case c = good;  // slices one k-tile short: the last k-tiles of each slice summed by none
    --c.p.slice_tiles;
    EXPECT_GT(ReplayMismatches(s, ReplayAt(s, bn, c, in, &once), in), 0);
  }
  {
    Case c = good;  // the padding one row off
    ++c.p.pt;
    EXPECT_GT(ReplayMismatches(s, ReplayAt(s, bn, c, in, &once), in), 0);
  }
}

// Copy warps write 32 distinct banks of the A stage per copy.
TEST(ImplicitGemmWgmmaWgradLayout, CopyWritesAreBankConflictFree) {
  const Shape s = AsOp(WithGeometry({2, 16, 8, 20, 20, 3, 3}, 1, 1, 1, 1, 1, 1), Op::kWgrad);
  const Case c = MakeCase(s, 32, 4);
  for (int warp = 0; warp < kCopyThreads / 32; ++warp) {
    std::vector<std::vector<int>> at(32);
    for (int lane = 0; lane < 32; ++lane) {
      WgradAGather g;
      g.Init(c.p, 0, 32 * warp + lane);
      g.ForEach(c.p, 0, [&](int si, int, bool) { at[lane].push_back(si); });
    }
    for (size_t i = 0; i < at[0].size(); ++i) {
      uint32_t banks = 0;
      for (int lane = 0; lane < 32; ++lane) banks |= 1u << (at[lane][i] % 32);
      EXPECT_EQ(banks, 0xFFFFFFFFu) << "warp " << warp << " copy " << i;
    }
  }
}

// Copy thread t's dy copies land at BTileOffset of their channel and k column (channel
// t / kC + kR·j, columns kV·(t % kC) ..), 16-byte aligned when kV = 4, and each group of lanes a
// shared-memory store serves at once (a warp for 4 bytes, a quarter warp for 16) writes one whole
// 128-byte row: 32 distinct banks.
template <int BN, int kV>
void CheckSlots() {
  using G = WgradBGather<BN, kV>;
  const Shape s = AsOp(Shape{2, 16, BN, 20, 20, 3, 3}, Op::kWgrad);
  const Case c = MakeCase(s, BN, 4);
  ASSERT_TRUE(CanVectorizeDy(c.p, 0));
  ASSERT_FALSE(CanVectorizeDy(c.p, 4));
  for (int t = 0; t < kCopyThreads; ++t) {
    std::vector<int> copied;
    G::ForEach(c.p, 0, BN, 0, t, [&](int, int off, int, bool) { copied.push_back(off); });
    ASSERT_EQ(copied.size(), static_cast<size_t>(G::kPerThread));
    for (int j = 0; j < G::kPerThread; ++j) {
      EXPECT_EQ(copied[j], BTileOffset(t / G::kC + G::kR * j, kV * (t % G::kC)))
          << "thread " << t << " j " << j;
      EXPECT_EQ(copied[j] % kV, 0) << "aligned to the copy's width";
    }
  }
  const int lanes = 32 / kV;  // the lanes one store wavefront serves
  for (int q = 0; q < kCopyThreads / lanes; ++q)
    for (int j = 0; j < G::kPerThread; ++j) {
      uint32_t banks = 0;
      for (int lane = 0; lane < lanes; ++lane) {
        const int off = G::Slot(lanes * q + lane, j);
        for (int e = 0; e < kV; ++e) banks |= 1u << ((off + e) % 32);
      }
      EXPECT_EQ(banks, 0xFFFFFFFFu) << "BN " << BN << " kV " << kV << " lanes " << q << " j " << j;
    }
}
TEST(ImplicitGemmWgmmaWgradLayout, CopiesLandInTheSwizzledTile) {
  CheckSlots<32, 1>();
  CheckSlots<64, 1>();
  CheckSlots<128, 1>();
  CheckSlots<32, 4>();
  CheckSlots<64, 4>();
  CheckSlots<128, 4>();
}

// The split is a function of the shape (the device's SM count changes the grid, never the
// slices), ResNet's 56x56 layer gets whole rounds of units, and the algorithm proposes wgrad on
// a Hopper device within the contract.
TEST(ImplicitGemmWgmmaWgradPlan, SplitAndProposal) {
  const Shape s = Resnet64(Op::kWgrad);
  const int bn = ChooseBN(s);
  const absl::StatusOr<wgrad_split::SplitK> split = WgradSplitK(s, bn);
  ASSERT_TRUE(split.ok()) << split.status();
  const Params a = MakeWgradParams(s, bn, 132 * CtasPerSm(bn), *split);
  const Params b = MakeWgradParams(s, bn, 114 * CtasPerSm(bn), *split);
  EXPECT_EQ(a.slices, b.slices);
  EXPECT_EQ(a.slice_tiles, b.slice_tiles);
  // Whole rounds of units on 132 SMs: the last round at least 90% full.
  const int slots = kSplitSms * CtasPerSm(bn);
  const int rounds = (a.units + slots - 1) / slots;
  EXPECT_GE(a.units, 0.9 * rounds * slots) << a.units << " units, " << slots << " slots";
  EXPECT_LE(a.slice_tiles * kBK, kMaxContractReduction);
  EXPECT_EQ(a.fold_tiles * kBK, 32) << "ResNet's K past 73,728 terms: 32-term chunks";
  const Algorithm* alg = Registry::Global().Find("implicit_gemm_wgmma");
  ASSERT_NE(alg, nullptr);
  EXPECT_TRUE(alg->Computes(Op::kWgrad));
  EXPECT_FALSE(alg->Computes(Op::kDgrad));
  EXPECT_TRUE(alg->WithinContract(s).ok());
  for (const Shape& base : BackwardShapes()) {
    const Shape w = AsOp(base, Op::kWgrad);
    const bool depthwise = w.grouped() && w.in_per_group() == 1;  // the depthwise algorithm's
    EXPECT_EQ(alg->CanImplement(w).ok(), !depthwise) << w.ToString() << ": "
                                                     << alg->CanImplement(w);
  }
  const double t = alg->EstimateSeconds(s);
  EXPECT_TRUE(std::isfinite(t) && t > 0) << t;
  // The orientation by the model: EfficientNet's 40 -> 240 expansion at 28x28 swapped (its
  // estimate is the swapped shape's plus dw's transpose), its 240 -> 40 projection as it is;
  // never where the reduction is centred (16 -> 96 at 112x112: 401,408 terms).
  const Shape expand = AsOp(Shape{32, 40, 240, 28, 28, 1, 1}, Op::kWgrad);
  ASSERT_TRUE(CanSwapWgrad(expand));
  const double transpose = 8.0 * static_cast<double>(expand.filter_elements()) / 3e12 + 3e-6;
  EXPECT_NEAR(alg->EstimateSeconds(expand),
              alg->EstimateSeconds(SwappedWgrad(expand)) + transpose, 1e-12);
  const Shape reduce = AsOp(Shape{32, 240, 40, 28, 28, 1, 1}, Op::kWgrad);
  ASSERT_TRUE(CanSwapWgrad(reduce));
  EXPECT_LT(alg->EstimateSeconds(reduce), alg->EstimateSeconds(SwappedWgrad(reduce)));
  EXPECT_FALSE(CanSwapWgrad(AsOp(Shape{32, 16, 96, 112, 112, 1, 1}, Op::kWgrad)));
}

// The model's device with `sms` multiprocessors.
DeviceInfo ModelDeviceWithSms(int sms) {
  DeviceInfo d = DeviceInfo::ModelDevice();
  d.sm_count = sms;
  return d;
}

// The orientation, and so dw's rounding, is the same on every GPU: it is chosen on kSplitSms SMs
// whatever the device's count (the estimate says which: swapped, it is the swapped shape's plus
// dw's transpose). Over 1x1 shapes on either side of the choice and SM counts far from 132.
TEST(ImplicitGemmWgmmaWgradPlan, OrientationDoesNotDependOnTheDevice) {
  const Algorithm* alg = Registry::Global().Find("implicit_gemm_wgmma");
  ASSERT_NE(alg, nullptr);
  auto swapped_on = [&](const Shape& s, int sms) {
    const DeviceInfo d = ModelDeviceWithSms(sms);
    const absl::StatusOr<Proposal> plain = alg->Propose(s, d);
    const absl::StatusOr<Proposal> t = alg->Propose(SwappedWgrad(s), d);
    EXPECT_TRUE(plain.ok() && t.ok()) << s.ToString();
    if (!plain.ok() || !t.ok()) return false;
    const double transpose = 8.0 * static_cast<double>(s.filter_elements()) / 3e12 + 3e-6;
    return std::abs(plain->estimated_seconds - (t->estimated_seconds + transpose)) <=
           1e-9 * plain->estimated_seconds;
  };
  int swapped = 0, plain = 0;
  for (int cin : {8, 16, 24, 40, 64, 96, 192}) {
    for (int cout : {16, 48, 96, 144, 240, 384}) {
      for (int hw : {7, 14, 28}) {
        const Shape s = AsOp(Shape{32, cin, cout, hw, hw, 1, 1}, Op::kWgrad);
        // The im2col form's shapes are chosen on kSplitSms SMs as well: Im2colChoice, below.
        if (!CanSwapWgrad(s) || Im2colTakes(s)) continue;
        const bool at_fixed = swapped_on(s, kSplitSms);
        (at_fixed ? swapped : plain)++;
        for (int sms : {8, 20, 66, 114, 144}) {
          EXPECT_EQ(swapped_on(s, sms), at_fixed) << s.ToString() << " on " << sms << " SMs";
        }
      }
    }
  }
  EXPECT_GT(swapped, 0);
  EXPECT_GT(plain, 0);
}

// The im2col form's index maps (Im2colSource, Im2colDySource) make the wgrad: col and dyt
// gathered on the CPU and multiplied in double equal the fp64 reference, on every ungrouped
// replay shape (strides, padding, dilation, odd sizes, batch 1, K = 1).
TEST(ImplicitGemmWgmmaWgradIm2col, MapsMakeTheWgrad) {
  int checked = 0, padded = 0;
  for (const Shape& base : BackwardShapes()) {
    const Shape s = AsOp(base, Op::kWgrad);
    if (s.grouped()) continue;
    SCOPED_TRACE(s.ToString());
    const ReplayInputs in = MakeReplayInputs(s, 17);
    const Im2colMap g = MakeIm2colMap(s);
    std::vector<double> dw(s.filter_elements(), 0.0);
    for (int k = 0; k < g.k; ++k) {
      for (int m = 0; m < g.m; ++m) {
        const int src = Im2colSource(g, k, m);
        padded += src < 0;
        if (src < 0) continue;
        ASSERT_LT(src, s.input_elements());
        for (int o = 0; o < g.cout; ++o) {
          const int d = Im2colDySource(g, o, k);
          ASSERT_LT(d, s.output_elements());
          dw[static_cast<size_t>(o) * g.m + m] +=
              static_cast<double>(in.dy[d]) * static_cast<double>(in.x[src]);
        }
      }
    }
    const std::vector<double> ref = Reference(s, HostInputs(in.x, in.w, {}, in.dy));
    ASSERT_EQ(ref.size(), dw.size());
    for (size_t e = 0; e < dw.size(); ++e) {
      ASSERT_NEAR(dw[e], ref[e], 1e-9 * (1.0 + std::abs(ref[e]))) << "element " << e;
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);
  EXPECT_GT(padded, 0) << "no shape exercises the padding";
}

// The form is chosen on kSplitSms SMs (its forward scheduled for them): the estimate, and so
// dw's rounding, is the same on every GPU where it is taken. ResNet-50's wgrads of 7x7 outputs
// take it; its 56x56 layers (K past kMaxContractReduction) cannot.
TEST(ImplicitGemmWgmmaWgradIm2col, Im2colChoice) {
  const Algorithm* alg = Registry::Global().Find("implicit_gemm_wgmma");
  ASSERT_NE(alg, nullptr);
  auto estimate_on = [&](const Shape& s, int sms) {
    const absl::StatusOr<Proposal> p = alg->Propose(s, ModelDeviceWithSms(sms));
    EXPECT_TRUE(p.ok()) << s.ToString() << p.status();
    return p.ok() ? p->estimated_seconds : 0.0;
  };
  const Shape r7 = AsOp(WithGeometry({32, 512, 512, 7, 7, 3, 3}, 1, 1, 1, 1, 1, 1), Op::kWgrad);
  const Shape r14 = AsOp(WithGeometry({32, 512, 512, 14, 14, 3, 3}, 1, 1, 1, 1, 2, 2), Op::kWgrad);
  const std::unique_ptr<Algorithm> im2col = MakeImplicitGemmWgmmaWgradForced(/*im2col=*/true);
  auto takes_im2col = [&](const Shape& s) {
    const absl::StatusOr<Proposal> i = im2col->Propose(s, ModelDeviceWithSms(kSplitSms));
    return i.ok() && i->estimated_seconds == estimate_on(s, kSplitSms);
  };
  // ResNet-50's layers of 7x7 outputs (measured 1.2-2.0x faster by the form, call D) take it.
  for (const Shape& s :
       {r7, r14, AsOp(Shape{32, 512, 2048, 7, 7, 1, 1}, Op::kWgrad),
        AsOp(Shape{32, 2048, 512, 7, 7, 1, 1}, Op::kWgrad),
        AsOp(WithGeometry({32, 1024, 2048, 14, 14, 1, 1}, 0, 0, 0, 0, 2, 2), Op::kWgrad)}) {
    ASSERT_TRUE(Im2colTakes(s)) << s.ToString();
    EXPECT_TRUE(takes_im2col(s)) << s.ToString();
    EXPECT_EQ(ChooseAlgorithm(s).value_or("none"), "implicit_gemm_wgmma") << s.ToString();
    const double at_fixed = estimate_on(s, kSplitSms);
    for (int sms : {8, 66, 114, 144}) {
      EXPECT_EQ(estimate_on(s, sms), at_fixed) << s.ToString() << " on " << sms << " SMs";
    }
  }
  // EfficientNet's 192 -> 1152 at 7x7 (measured 0.043 ms by the GEMM, 0.051 by the form) does
  // not; its squeeze-excite layers (one pixel) stay dot's.
  EXPECT_FALSE(takes_im2col(AsOp(Shape{32, 192, 1152, 7, 7, 1, 1}, Op::kWgrad)));
  for (const Shape& se : {AsOp(Shape{32, 1152, 48, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, true},
                               Op::kWgrad),
                          AsOp(Shape{32, 48, 1152, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, true},
                               Op::kWgrad)}) {
    EXPECT_EQ(ChooseAlgorithm(se).value_or("none"), "dot") << se.ToString();
  }
  EXPECT_FALSE(Im2colTakes(Resnet64(Op::kWgrad)));
  EXPECT_FALSE(Im2colTakes(AsOp(Shape{1, 4, 70000, 7, 7, 1, 1}, Op::kWgrad)))
      << "more output channels than dyt's grid has rows";
  EXPECT_FALSE(Im2colTakes(AsOp(Shape{32, 510, 512, 7, 7, 1, 1}, Op::kWgrad)))
      << "Cin*Kh*Kw not a multiple of 4";
  EXPECT_FALSE(Im2colTakes(AsOp(WithGeometry({32, 512, 512, 7, 7, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1, 2),
                                Op::kWgrad)))
      << "grouped";
  // Which of the replay's shapes and the networks' 7x7-output layers take it (the lab's
  // variant, wgrad's own GEMM, estimated beside): printed.
  const std::unique_ptr<Algorithm> gemm = MakeImplicitGemmWgmmaWgradForced(/*im2col=*/false);
  std::vector<Shape> shapes;
  for (const Shape& base : BackwardShapes()) shapes.push_back(AsOp(base, Op::kWgrad));
  for (const Shape& s : {r7, r14, AsOp(Shape{32, 512, 2048, 7, 7, 1, 1}, Op::kWgrad),
                         AsOp(Shape{32, 2048, 512, 7, 7, 1, 1}, Op::kWgrad),
                         AsOp(WithGeometry({32, 1024, 2048, 14, 14, 1, 1}, 0, 0, 0, 0, 2, 2),
                              Op::kWgrad),
                         AsOp(Shape{32, 1152, 192, 7, 7, 1, 1}, Op::kWgrad),
                         AsOp(Shape{32, 192, 1152, 7, 7, 1, 1}, Op::kWgrad),
                         AsOp(Shape{32, 1152, 320, 7, 7, 1, 1}, Op::kWgrad),
                         AsOp(Shape{32, 320, 1280, 7, 7, 1, 1}, Op::kWgrad),
                         AsOp(Shape{32, 672, 192, 7, 7, 1, 1}, Op::kWgrad)}) {
    shapes.push_back(s);
  }
  for (const Shape& s : shapes) {
    if (!Im2colTakes(s)) continue;
    const DeviceInfo d = ModelDeviceWithSms(kSplitSms);
    const absl::StatusOr<Proposal> g = gemm->Propose(s, d);
    const absl::StatusOr<Proposal> i = im2col->Propose(s, d);
    std::printf("%-40s estimate %8.2f us: wgrad's GEMM %8.2f us, im2col %8.2f us\n",
                s.ToString().c_str(), estimate_on(s, kSplitSms) * 1e6,
                g.ok() ? g->estimated_seconds * 1e6 : -1.0,
                i.ok() ? i->estimated_seconds * 1e6 : -1.0);
  }
}

}  // namespace
}  // namespace implicit_gemm_wgmma_internal
}  // namespace conv2d
