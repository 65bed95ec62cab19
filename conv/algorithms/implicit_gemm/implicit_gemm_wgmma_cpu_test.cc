// implicit_gemm_wgmma without a GPU: the kernel's index algebra (the same header functions,
// compiled for the host) replayed persistent CTA by CTA, each walking its work units with the ring
// slots, shared memory and fold sums carried from unit to unit -- the filter split into the workspace, the
// bulk copy and every thread's cp.async into a shared-memory image addressed like the kernel's, the wgmma operands
// read the way the PTX ISA defines them (A from the lanes' registers by the register-fragment
// table, B through the matrix descriptor and the 128-byte swizzle; both coded here independently
// of the kernel's helpers), the accumulator table, the fold schedule, the epilogue's stores and
// the stream-K tail's pieces through the workspace -- and compared with the fp64 reference, and
// bit for bit across CTA completion orders. Plus the descriptor's bit fields, the swizzle bijection,
// the full/empty ring protocol between the copy warpgroup and the consumers (random
// interleavings, within a work unit and across units), the work-unit walk (every (tile, k-tile)
// once), bank conflicts and the shape limits.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_testing.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_internal.h"
#include "conv/arch/split_3xtf32.h"
#include "conv/core/registry.h"
#include "conv/testing/cpu_replay/tf32_model.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace implicit_gemm_wgmma_internal {
namespace {

using namespace implicit_gemm_testing;  // NOLINT: the family's shared test helpers

// The split of both operands (the filter's in SplitFilterKernel, the input's in the main loop):
// the kernels' own SplitTf32. The emulated wgmma reads every operand through TensorCoreOperand,
// which requires the hi parts to be TF32 values already.
// ---- The PTX ISA's tables, written out again (not the kernel's AFragIndex/AccCoord).
// wgmma .tf32 A register fragment (m64 x k8): warp w rows 16w.., like mma.m16n8k8's A.
int PtxARow(int warp, int lane, int reg) { return 16 * warp + lane / 4 + (reg % 2) * 8; }
int PtxACol(int lane, int reg) { return lane % 4 + (reg / 2) * 4; }
// wgmma f32 accumulator (m64 x nN): register 4i+2h+c at row 16w + lane/4 + 8h, col 8i + 2*(lane%4) + c.
int PtxDRow(int warp, int lane, int reg) { return 16 * warp + lane / 4 + ((reg / 2) % 2) * 8; }
int PtxDCol(int lane, int reg) { return (reg / 4) * 8 + 2 * (lane % 4) + reg % 2; }

// The shared-memory matrix descriptor decoded field by field (PTX ISA "Matrix Descriptor Format").
struct Desc {
  uint32_t start, lbo, sbo, base_offset, swizzle;
};
Desc Decode(uint64_t d) {
  Desc r;
  r.start = static_cast<uint32_t>(d & 0x3FFF) << 4;
  r.lbo = static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4;
  r.sbo = static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4;
  r.base_offset = static_cast<uint32_t>((d >> 49) & 7);
  r.swizzle = static_cast<uint32_t>(d >> 62);
  return r;
}
// The byte address wgmma reads for element (row n, column k) of a K-major tf32 operand with the
// 128-byte swizzle: the unswizzled address start + (n/8)*SBO + (n%8)*128 + 4k, then bits 4-6
// XORed with bits 7-9 (16-byte chunk index XOR row within the 8-row atom).
uint32_t SwizzledAddress(const Desc& d, int n, int k) {
  const uint32_t addr = d.start + (n / 8) * d.sbo + (n % 8) * 128 + 4 * k;
  return addr ^ (((addr >> 7) & 7) << 4);
}

// The kernel's shared memory: its dynamic array is placed at a deliberately unaligned address of
// the shared window, so the kernel's alignment arithmetic is exercised.
constexpr uint32_t kSmemRaw = 0x2a0;

// The kernels' tile arithmetic as the launch picks it: the grouped kernels' for groups > 1.
NTile TileOf(const Params& p, int bn, int nt) {
  return p.groups > 1 ? NTileOf<true>(p, bn, nt) : NTileOf<false>(p, bn, nt);
}
void SplitTarget(const Params& p, int bn, int block, int e, int* n, int* n_end, int* k,
                 int64_t* hi_at) {
  if (p.groups > 1) {
    SplitFilterTarget<true>(p, bn, block, e, n, n_end, k, hi_at);
  } else {
    SplitFilterTarget<false>(p, bn, block, e, n, n_end, k, hi_at);
  }
}

// Host replica of the filter split (SplitFilterKernel): every block's elements, through the
// header's SplitFilterTarget.
std::vector<float> SplitFilter(const Shape& s, const Params& p, int bn,
                               const std::vector<float>& w) {
  std::vector<float> ws(SplitFilterBytes(s, bn) / 4, std::numeric_limits<float>::quiet_NaN());
  for (int block = 0; block < p.n_tiles * p.k_tiles; ++block) {
    for (int t = 0; t < kSplitThreads; ++t) {
      for (int e = t; e < bn * kBK; e += kSplitThreads) {
        int n, n_end, k;
        int64_t hi_at;
        SplitTarget(p, bn, block, e, &n, &n_end, &k, &hi_at);
        const float v = (n < n_end && k < p.k) ? w[int64_t{n} * p.k + k] : 0.f;
        uint32_t hi, lo;
        SplitTf32(v, hi, lo);
        ws[hi_at] = BitsFloat(hi);
        ws[hi_at + bn * kBK] = BitsFloat(lo);
      }
    }
  }
  return ws;
}

// One work unit of a CTA replayed (the body of the kernel's unit loop): its stages g0, g0 + 1,
// ... in ring slots g % kStages of the CTA's shared memory `at`; acc and sum: the CTA's
// accumulators.
// The copy warpgroup's gather as the kernel instantiates it.
template <int BN, bool kVecA, bool kGeometry>
using KernelGather = AGather<kVecA, Config<BN>::kUnmaskedGather && !kGeometry, kGeometry>;

// The tail's workspace as the kernel uses it (The tail's pieces): the slots, NaN until written,
// with a count of writes per float, and the counters, poisoned until the split kernel's zeroing.
struct TailWorkspace {
  std::vector<float> partials;
  std::vector<int> slot_writes;
  std::vector<int> counters;
};

template <int BN, bool kVecA, bool kGeometry, class At>
void EmulateUnit(const Shape& s, const Params& p, int cta, const WorkUnit& wu, int g0,
                 const std::vector<float>& x, const std::vector<float>& ws,
                 std::vector<KernelGather<BN, kVecA, kGeometry>>& ag, At& at,
                 std::vector<double>& acc, std::vector<double>& sum, std::vector<double>& y,
                 std::vector<int>& writes, TailWorkspace& tail) {
  using C = Config<BN>;
  const NTile tile = TileOf(p, BN, wu.n_tile);
  const int m0 = wu.m_tile * kBM, n0 = tile.n0;
  const int c0 = tile.x0 / p.hw;  // the group's first input channel
  const int kt_begin = wu.kt_begin, kt_end = wu.kt_begin + wu.stages;
  const int n_tile = wu.n_tile;
  const uint32_t base = AlignSmemBase(kSmemRaw);
  // The copy warpgroup's threads (t = index within it): their gathers, kept from the previous
  // unit and Init'ed again, as the kernel does.
  for (int t = 0; t < kCopyThreads; ++t) ag[t].Init(p, m0, t);

  int fold_count = 0;
  int dirty = 0;  // hi operands with bits below TF32 (TensorCoreOperand)
  constexpr int kWA = kVecA ? 4 : 1;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int stage = RingSlot<C::kStages>(g0 + kt - kt_begin);
    ASSERT_EQ(stage, (g0 + kt - kt_begin) % C::kStages);
    const uint32_t sb = base + stage * C::kStageBytes;
    const uint32_t sa = sb + 2 * C::kBTileBytes;
    // Poison the stage, then replay every copy thread's copies.
    for (uint32_t a = sb; a < sb + C::kStageBytes; a += 4) at(a) = std::numeric_limits<float>::quiet_NaN();
    std::vector<int> written(C::kStageBytes / 4, 0);
    for (int t = 0; t < kCopyThreads; ++t) {
      ag[t].ForEach(p, kt, [&](int si, int g, bool valid) {
        // The kernel reads x + x0 + g (x0: the unit's group, CopyStages).
        ReplayAGatherCopy(p, kt, m0, kBM, kBK, kAStride, kWA, x, si, valid ? tile.x0 + g : g,
                          valid,
                          [&](int sj, float v) {
                            at(sa + 4 * sj) = v;
                            ++written[(sa - sb) / 4 + sj];
                          },
                          c0);
      });
      if (::testing::Test::HasFatalFailure()) return;
      const int64_t src = WorkspaceTile(BN, p.k_tiles, n_tile, kt, 0);
      if (t == 0) {  // the bulk copy of the (hi, lo) pair, issued by copy thread 0
        constexpr int kFloats = 2 * C::kBTileFloats;
        ASSERT_EQ(kFloats % 4, 0) << "bulk copy size not a multiple of 16 bytes";
        ASSERT_EQ(src % 4, 0) << "bulk copy from an unaligned workspace offset";
        ASSERT_EQ((sb - base) % 16, 0u);
        for (int e = 0; e < kFloats; ++e) {
          at(sb + 4 * e) = ws[src + e];
          ++written[e];
        }
      }
    }
    for (int i = 0; i < C::kStageBytes / 4; ++i) {
      const bool pad = i >= 2 * C::kBTileFloats && (i - 2 * C::kBTileFloats) % kAStride >= kBM;
      ASSERT_EQ(written[i], pad ? 0 : 1) << "stage float " << i;
    }

    // The two warpgroups' k8 steps.
    const uint64_t desc_hi = MakeDescriptor(sb), desc_lo = MakeDescriptor(sb + C::kBTileBytes);
    for (int wg = 0; wg < 2; ++wg) {
      for (int j = 0; j < kK8Steps; ++j) {
        double a_hi[64][8], a_lo[64][8];
        int seen[64][8] = {};
        for (int warp = 0; warp < 4; ++warp)
          for (int lane = 0; lane < 32; ++lane)
            for (int reg = 0; reg < 4; ++reg) {
              const float v = at(sa + 4 * AFragIndex(wg, warp, j, lane, reg));
              ASSERT_FALSE(std::isnan(v)) << "A fragment reads an unwritten word";
              uint32_t hi, lo;
              SplitTf32(v, hi, lo);
              const int r = PtxARow(warp, lane, reg), c = PtxACol(lane, reg);
              a_hi[r][c] = TensorCoreOperand(hi, /*must_be_tf32=*/true, &dirty);
              a_lo[r][c] = TensorCoreOperand(lo, /*must_be_tf32=*/false, &dirty);
              ++seen[r][c];
            }
        for (int r = 0; r < 64; ++r)
          for (int c = 0; c < 8; ++c) ASSERT_EQ(seen[r][c], 1);
        const Desc dh = Decode(DescriptorAtStep(desc_hi, j));
        const Desc dl = Decode(DescriptorAtStep(desc_lo, j));
        ASSERT_EQ(dh.swizzle, 1u);
        ASSERT_EQ(dl.swizzle, 1u);
        std::vector<double> b_hi(8 * BN), b_lo(8 * BN);
        for (int n = 0; n < BN; ++n)
          for (int k = 0; k < 8; ++k) {
            // The hi plane must hold TF32 values; lo keeps its low bits for the tensor core to drop.
            const uint32_t bh = FloatBits(at(SwizzledAddress(dh, n, k)));
            const uint32_t bl = FloatBits(at(SwizzledAddress(dl, n, k)));
            b_hi[k * BN + n] = TensorCoreOperand(bh, /*must_be_tf32=*/true, &dirty);
            b_lo[k * BN + n] = TensorCoreOperand(bl, /*must_be_tf32=*/false, &dirty);
            ASSERT_FALSE(std::isnan(b_hi[k * BN + n]) || std::isnan(b_lo[k * BN + n]));
          }
        // lo*Bhi (scale-d 0 at a chunk's first step), hi*Blo, hi*Bhi.
        const bool keep = !(j == 0 && fold_count == 0);
        double* d = &acc[wg * 64 * BN];
        for (int r = 0; r < 64; ++r)
          for (int n = 0; n < BN; ++n) {
            double t = 0;
            for (int k = 0; k < 8; ++k) {
              t += a_lo[r][k] * b_hi[k * BN + n] + a_hi[r][k] * b_lo[k * BN + n] +
                   a_hi[r][k] * b_hi[k * BN + n];
            }
            d[r * BN + n] = (keep ? d[r * BN + n] : 0.0) + t;
          }
      }
    }
    ASSERT_EQ(dirty, 0) << "wgmma hi operands with bits below TF32";
    if (++fold_count == kFoldTiles) {
      fold_count = 0;
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += acc[i];
    }
  }
  // The unit's end: the partial chunk folded into sum; then the (deferred) stores of sum, which
  // zero it for the next unit.
  if (fold_count != 0) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += acc[i];
  }
  // Epilogue: each thread's registers, stored where the kernel stores them: y, or for a tail piece
  // short of its tile the piece's slot (the kernel's fp32 register values), after which each
  // consumer warp arrives on its counter and the tile's last one adds the slots in k order.
  for (int wg = 0; wg < 2; ++wg)
    for (int warp = 0; warp < 4; ++warp) {
      const int cwarp = wg * 4 + warp;  // the consumer warp, tid / 32
      bool reduce = false;
      TailPieces pieces;
      if (IsPartial(p, wu)) {
        for (int lane = 0; lane < 32; ++lane) {
          const int tid = cwarp * 32 + lane;
          for (int reg = 0; reg < C::kAccRegs; ++reg) {
            int ml, nl;
            AccCoord(wg, warp, lane, reg, &ml, &nl);
            const int idx = wg * 64 * BN + (ml - wg * 64) * BN + nl;
            const int64_t at_slot = PartialAt(BN, PartialSlot(cta, TailTileOf(p, wu)), reg, tid);
            ASSERT_TRUE(at_slot >= 0 && at_slot < static_cast<int64_t>(tail.partials.size()));
            ASSERT_EQ(tail.slot_writes[at_slot]++, 0) << "a slot float written twice";
            tail.partials[at_slot] = static_cast<float>(sum[idx]);
          }
        }
        const int c = TailCounter(TailTileOf(p, wu), cwarp);
        ASSERT_TRUE(c >= 0 && c < static_cast<int>(tail.counters.size()));
        pieces = PiecesOf(p, TailTileOf(p, wu));
        ASSERT_GE(pieces.count, 2);
        const int arrived = tail.counters[c]++;
        ASSERT_LT(arrived, pieces.count) << "more arrivals than pieces";
        reduce = arrived == pieces.count - 1;
        if (!reduce) continue;
      }
      for (int lane = 0; lane < 32; ++lane)
        for (int reg = 0; reg < C::kAccRegs; ++reg) {
          int ml, nl;
          AccCoord(wg, warp, lane, reg, &ml, &nl);
          const int idx = wg * 64 * BN + PtxDRow(warp, lane, reg) * BN + PtxDCol(lane, reg);
          ASSERT_EQ(ml, wg * 64 + PtxDRow(warp, lane, reg));
          ASSERT_EQ(nl, PtxDCol(lane, reg));
          const int m = m0 + ml, n = n0 + nl;
          if (m >= p.m || n >= tile.n_end) continue;
          const int64_t y_at = YRowBase(p, m) + int64_t{n} * p.p;
          ASSERT_TRUE(y_at >= 0 && y_at < s.output_elements());
          if (reduce) {
            // The pieces' slots in k order, fp32 additions (the kernel's __fadd_rn).
            const int tid = cwarp * 32 + lane;
            float v = 0;
            for (int k = 0; k < pieces.count; ++k) {
              const int64_t a =
                  PartialAt(BN, PartialSlot(pieces.first_cta + k, TailTileOf(p, wu)), reg, tid);
              ASSERT_EQ(tail.slot_writes[a], 1) << "reads a slot its piece has not written";
              v = k == 0 ? tail.partials[a] : v + tail.partials[a];
            }
            y[y_at] = v;
          } else {
            y[y_at] = sum[idx];
          }
          ++writes[y_at];
        }
    }
  // StoreQuarter zeroes every register it handles, stored or not (rows past M, channels past
  // Cout): the next unit starts from zero sums.
  std::fill(sum.begin(), sum.end(), 0.0);
}

// One persistent CTA replayed: its work units (UnitWalk), its stages numbered across units so
// that stage g uses ring slot g % kStages as in the kernel, its shared memory kept from unit to
// unit, and its fold sums likewise (the deferred epilogue stores a unit's sums and zeroes them for
// the next). y: NaN-initialised; writes counts stores per element; covered counts the k-tiles
// computed per tile, pieces its units; tail: the tail's workspace, shared by the CTAs.
template <int BN, bool kVecA, bool kGeometry>
void EmulateCta(const Shape& s, const Params& p, int cta, const std::vector<float>& x,
                const std::vector<float>& ws, std::vector<double>& y, std::vector<int>& writes,
                std::vector<int>& covered, std::vector<int>& pieces, TailWorkspace& tail) {
  using C = Config<BN>;
  const uint32_t base = AlignSmemBase(kSmemRaw);
  ASSERT_EQ(base % 1024, 0u);
  // The stages, then the ring's barriers (8-byte aligned), inside the allocation.
  ASSERT_LE(base + C::kStages * C::kStageBytes + C::kBarrierBytes, kSmemRaw + C::kSmemBytes)
      << "past the allocation";
  static_assert(C::kStageBytes % 8 == 0, "aligned barriers");
  // Shared memory as floats indexed by (address - kSmemRaw) / 4.
  std::vector<float> smem(C::kSmemBytes / 4, std::numeric_limits<float>::quiet_NaN());
  static float out_of_range;
  auto at = [&](uint32_t addr) -> float& {
    const bool ok = addr % 4 == 0 && addr >= kSmemRaw && addr < kSmemRaw + C::kSmemBytes;
    EXPECT_TRUE(ok) << "shared address " << addr;
    return ok ? smem[(addr - kSmemRaw) / 4] : out_of_range;
  };
  // Per warpgroup, [64][BN], as the PTX accumulator table lays them out: acc (the current chunk)
  // and sum (the folds; zero at the start and after each unit's stores).
  std::vector<double> acc(2 * 64 * BN, std::numeric_limits<double>::quiet_NaN());
  std::vector<double> sum(2 * 64 * BN, 0.0);
  std::vector<KernelGather<BN, kVecA, kGeometry>> ag(kCopyThreads);
  int g = 0;  // the CTA's stage index over its units
  UnitWalk walk(p, cta);
  WorkUnit wu;
  while (walk.Next(p, &wu)) {
    ASSERT_TRUE(wu.m_tile >= 0 && wu.m_tile < p.m_tiles && wu.n_tile >= 0 && wu.n_tile < p.n_tiles);
    ASSERT_GE(wu.stages, 1) << "empty unit";
    ASSERT_LE(wu.kt_begin + wu.stages, p.k_tiles);
    covered[static_cast<size_t>(wu.m_tile) * p.n_tiles + wu.n_tile] += wu.stages;
    ++pieces[static_cast<size_t>(wu.m_tile) * p.n_tiles + wu.n_tile];
    ASSERT_TRUE(!IsPartial(p, wu) || TailTileOf(p, wu) >= 0) << "a partial unit of the rounds";
    EmulateUnit<BN, kVecA, kGeometry>(s, p, cta, wu, g, x, ws, ag, at, acc, sum, y, writes, tail);
    if (::testing::Test::HasFatalFailure()) return;
    g += wu.stages;
  }
}

// slots: the GPU's CTA slots (SMs x CTAs per SM) the persistent grid is sized for; the default,
// a small GPU of 3, gives every CTA several units, so the ring runs on across unit boundaries,
// and often a tail. tail: whether the schedule must have a stream-K tail (unset: either).
// cta_order: the order the CTAs are replayed in, which is the order their tail pieces arrive
// (default 0, 1, ...); y_out: the outputs; x_set: x elements (flat index, value) set after the
// seeded fill, infinities among them: an output whose fp64 reference is non-finite must then
// be that infinity (or NaN where the reference is NaN), as fp32 summation gives.
template <int BN, bool kVecA, bool kGeometry = false>
void CheckShape(const Shape& s, uint64_t seed, int slots = 3, std::optional<bool> tail = {},
                const std::vector<int>* cta_order = nullptr, std::vector<double>* y_out = nullptr,
                const std::vector<std::pair<int64_t, float>>& x_set = {}) {
  SCOPED_TRACE(s.ToString() + " BN " + std::to_string(BN) + (kVecA ? " vecA" : " scalarA") +
               " slots " + std::to_string(slots));
  ASSERT_TRUE(CheckIndexing(s).ok());
  const Params p = MakeParams(s, BN, slots);
  ASSERT_EQ(p.geometry, kGeometry);
  ASSERT_EQ(p.tiles, NumTiles(s, BN));
  ASSERT_TRUE(p.grid >= 1 && p.grid <= slots);
  if (tail.has_value()) {
    ASSERT_EQ(p.tail_ctas > 0, *tail);
  }
  if (kVecA) {
    ASSERT_TRUE(CanVectorizeA(p, 0));
  }
  std::vector<float> x = RandomTensor(seed, kInputTensor, s.input_elements());
  for (const auto& [at, v] : x_set) x.at(static_cast<size_t>(at)) = v;
  const std::vector<float> w = RandomTensor(seed, kFilterTensor, s.filter_elements());
  const std::vector<float> ws = SplitFilter(s, p, BN, w);
  std::vector<double> y(s.output_elements(), std::numeric_limits<double>::quiet_NaN());
  // The tail's workspace: the counters poisoned, then zeroed by the split kernel's extra blocks,
  // each once.
  TailWorkspace tail_ws;
  tail_ws.partials.assign(static_cast<size_t>(PartialSlots(p) * (BN / 2) * kConsumerThreads),
                       std::numeric_limits<float>::quiet_NaN());
  tail_ws.slot_writes.assign(tail_ws.partials.size(), 0);
  tail_ws.counters.assign(static_cast<size_t>(TailCounters(p)), -777);
  ASSERT_EQ(TailWorkspaceBytes(p, BN),
            TailCounterBytes(p) + static_cast<int64_t>(tail_ws.partials.size()) * 4);
  ASSERT_GE(TailCounterBytes(p), static_cast<int64_t>(tail_ws.counters.size()) * 4);
  for (int z = 0; z < TailZeroBlocks(p); ++z) {
    for (int t = 0; t < kSplitThreads; ++t) {
      const int i = z * kSplitThreads + t;  // SplitFilterKernel's zeroing thread
      if (i < TailCounters(p)) {
        ASSERT_EQ(tail_ws.counters[i], -777) << "counter " << i << " zeroed twice";
        tail_ws.counters[i] = 0;
      }
    }
  }
  for (int c : tail_ws.counters) ASSERT_EQ(c, 0) << "a counter left unzeroed";
  std::vector<int> writes(s.output_elements(), 0);
  std::vector<int> covered(static_cast<size_t>(p.tiles), 0), pieces(static_cast<size_t>(p.tiles), 0);
  std::vector<int> order(p.grid);
  for (int cta = 0; cta < p.grid; ++cta) order[cta] = cta;
  if (cta_order != nullptr) {
    order = *cta_order;
    std::vector<int> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int cta = 0; cta < p.grid; ++cta) ASSERT_EQ(sorted.at(cta), cta) << "not a permutation";
  }
  for (int cta : order) {
    EmulateCta<BN, kVecA, kGeometry>(s, p, cta, x, ws, y, writes, covered, pieces, tail_ws);
    if (::testing::Test::HasFatalFailure()) return;
  }
  for (int t = 0; t < p.tiles; ++t) ASSERT_EQ(covered[t], p.k_tiles) << "tile " << t;
  // The split drops a_lo*b_lo and the tensor core truncates lo: each product is off by at most
  // ~2^-21 |ab| (conv/arch/split_3xtf32.h), summed here in double. A misplaced operand would be
  // off by a whole |ab| term, ~sum|ab|/K, far above the 2^-19 bound.
  std::vector<float> ax(x.size()), aw(w.size());
  for (size_t i = 0; i < x.size(); ++i) ax[i] = std::abs(x[i]);
  for (size_t i = 0; i < w.size(); ++i) aw[i] = std::abs(w[i]);
  const std::vector<double> ref = ReferenceConv(s, x.data(), w.data());
  const std::vector<double> mag = ReferenceConv(s, ax.data(), aw.data());
  int64_t bad = 0;
  for (int64_t i = 0; i < s.output_elements(); ++i) {
    // Stored once: by its whole tile, or by the tail tile's last warp to arrive.
    ASSERT_EQ(writes[i], 1) << "output " << i << " written " << writes[i] << " times";
    if (!std::isfinite(ref[i])) {
      const bool same = std::isnan(ref[i]) ? std::isnan(y[i]) : y[i] == ref[i];
      if (!same && bad++ < 5) {
        ADD_FAILURE() << "output " << i << ": emulated " << y[i] << " reference " << ref[i];
      }
      continue;
    }
    if (!(std::abs(y[i] - ref[i]) <= std::ldexp(mag[i], -19) + 1e-30) && bad++ < 5) {
      ADD_FAILURE() << "output " << i << ": emulated " << y[i] << " reference " << ref[i]
                    << " bound " << std::ldexp(mag[i], -19);
    }
  }
  EXPECT_EQ(bad, 0);
  if (y_out != nullptr) *y_out = y;
}

// Keep the replay quick: the shapes whose padded GEMM is small.
std::vector<Shape> EmulatedShapes() {
  const std::vector<Shape> out = ReplayShapes(
      {Shape{1, 64, 64, 8, 8, 1, 1}, Shape{2, 8, 136, 8, 12, 1, 1}, Shape{1, 24, 200, 6, 6, 3, 3}},
      [](const Shape& s) {
        const int bn = ChooseBN(s);
        return static_cast<double>(NumTiles(s, bn)) * kBM * bn *
               ((s.in_channels * s.kernel_h * s.kernel_w + kBK - 1) / kBK * kBK) * 3;
      },
      3e9);
  std::printf("emulating %zu shapes\n", out.size());
  return out;
}

// Every shape at its own BN; the BN = 32 shapes also at 64, which took them before BN = 32 was.
TEST(ImplicitGemmWgmmaEmulationTest, ScalarGatherMatchesReference) {
  int covered32 = 0, covered64 = 0, covered128 = 0;  // shapes by their own BN
  for (const Shape& s : EmulatedShapes()) {
    switch (ChooseBN(s)) {
      case 32:
        CheckShape<32, false>(s, 7);
        CheckShape<64, false>(s, 7);
        ++covered32;
        break;
      case 64:
        CheckShape<64, false>(s, 7);
        ++covered64;
        break;
      default:
        CheckShape<128, false>(s, 7);
        ++covered128;
    }
  }
  EXPECT_GE(covered32, 5);
  EXPECT_GE(covered64, 1);
  EXPECT_GE(covered128, 3);
}

TEST(ImplicitGemmWgmmaEmulationTest, VectorGatherMatchesReference) {
  int covered = 0;
  for (const Shape& s : EmulatedShapes()) {
    if (!CanVectorizeA(MakeParams(s, 64, 1), 0)) continue;
    ++covered;
    switch (ChooseBN(s)) {  // the H200's grid
      case 32: CheckShape<32, true>(s, 8, 132 * Config<32>::kMinBlocks); break;
      case 64: CheckShape<64, true>(s, 8, 132 * Config<64>::kMinBlocks); break;
      default: CheckShape<128, true>(s, 8, 132 * Config<128>::kMinBlocks);
    }
  }
  EXPECT_GE(covered, 3);
}

// Every BN on a few shapes, so every kernel's maps are replayed with several N tiles.
TEST(ImplicitGemmWgmmaEmulationTest, AllTileWidths) {
  for (const Shape& s : {Shape{1, 5, 130, 9, 11, 3, 2}, Shape{2, 8, 136, 8, 12, 1, 1},
                         Shape{1, 3, 40, 12, 12, 3, 3}}) {
    CheckShape<32, false>(s, 9, /*slots=*/1);  // one CTA runs every unit
    CheckShape<64, false>(s, 9, /*slots=*/1);
    CheckShape<128, false>(s, 9, /*slots=*/1);
  }
}

// Padding (asymmetric, wider than the kernel's reach on one side), stride (larger than the
// kernel too), dilation, and the networks' forms (3x3 pad 1, 7x7 stride 2 pad 3, 1x1 stride 2,
// 2x2 and 4x4 patches), at every BN, with several CTAs and a tail.
std::vector<Shape> GeometryShapes() {
  auto g = [](Shape s, int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t sh, int64_t sw,
              int64_t dh, int64_t dw) {
    s.pad_top = pt, s.pad_bottom = pb, s.pad_left = pl, s.pad_right = pr;
    s.stride_h = sh, s.stride_w = sw, s.dilation_h = dh, s.dilation_w = dw;
    return s;
  };
  return {
      g(Shape{2, 8, 24, 14, 14, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1),   // 3x3 pad 1
      g(Shape{2, 8, 40, 15, 13, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1),   // 3x3 stride 2 pad 1, odd sizes
      g(Shape{1, 3, 16, 30, 30, 7, 7}, 3, 3, 3, 3, 2, 2, 1, 1),   // the ResNet stem, small
      g(Shape{2, 16, 70, 14, 14, 1, 1}, 0, 0, 0, 0, 2, 2, 1, 1),  // 1x1 stride 2 (downsample)
      g(Shape{2, 6, 20, 16, 16, 4, 4}, 0, 0, 0, 0, 4, 4, 1, 1),   // 4x4 patches
      g(Shape{1, 5, 9, 11, 12, 2, 2}, 0, 0, 0, 0, 3, 3, 1, 1),    // stride larger than the kernel
      g(Shape{2, 4, 12, 17, 19, 3, 3}, 2, 0, 5, 1, 1, 1, 1, 1),   // asymmetric, pad > reach
      g(Shape{1, 6, 10, 20, 18, 3, 2}, 2, 2, 1, 3, 1, 2, 2, 3),   // dilation with stride
      g(Shape{1, 33, 130, 9, 11, 3, 2}, 1, 0, 0, 2, 1, 1, 1, 1),  // K = 198: several N tiles
      g(Shape{1, 3, 5, 12, 12, 1, 1}, 0, 0, 0, 0, 1, 1, 1, 1),    // dilation 1, K = 1 (basic)
      g(Shape{1, 3, 5, 12, 12, 1, 1}, 0, 0, 0, 0, 1, 1, 2, 2),    // dilation with K = 1
  };
}

TEST(ImplicitGemmWgmmaEmulationTest, GeometryGatherMatchesReference) {
  int shapes = 0;
  for (const Shape& s : GeometryShapes()) {
    ASSERT_TRUE(ValidateShape(s).ok()) << s.ToString();
    if (!MakeParams(s, 64, 1).geometry) {
      CheckShape<64, false>(s, 12);
      continue;
    }
    ++shapes;
    CheckShape<32, false, true>(s, 12);
    CheckShape<64, false, true>(s, 12, /*slots=*/5);
    CheckShape<128, false, true>(s, 12, /*slots=*/1);
  }
  EXPECT_GE(shapes, 9);
}

// Groups as a grouped GEMM: each N tile within one group, gathering its group's input channels
// (odd channels per group, a group wider than BN, depthwise, with and without the geometry, the
// 16-byte gather, a stream-K tail).
TEST(ImplicitGemmWgmmaEmulationTest, GroupedGemmMatchesReference) {
  auto grouped = [](Shape s, int64_t groups, int64_t pad = 0, int64_t stride = 1) {
    s.groups = groups;
    s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = pad;
    s.stride_h = s.stride_w = stride;
    return s;
  };
  const Shape odd = grouped(Shape{2, 6, 10, 13, 11, 3, 3}, 2);         // 3 -> 5 per group
  const Shape wide = grouped(Shape{1, 8, 140, 9, 10, 3, 2}, 2);  // 70 per group: 2 tiles at 64
  const Shape resnext = grouped(Shape{2, 32, 32, 10, 10, 3, 3}, 4, 1);  // 8 -> 8, pad 1
  const Shape strided = grouped(Shape{2, 24, 36, 15, 13, 3, 3}, 3, 1, 2);
  const Shape depthwise = grouped(Shape{2, 5, 10, 9, 12, 3, 3}, 5, 1);  // multiplier 2
  const Shape one_by_one = grouped(Shape{2, 32, 64, 8, 12, 1, 1}, 4);   // vector gather
  // Every grouped shape runs the geometry gather (MakeParams), with or without padding.
  for (const Shape& s : {odd, wide, resnext, strided, depthwise, one_by_one}) {
    ASSERT_TRUE(ValidateShape(s).ok()) << s.ToString();
    ASSERT_TRUE(MakeParams(s, 32, 1).geometry) << s.ToString();
    CheckShape<32, false, true>(s, 21);
    CheckShape<64, false, true>(s, 21, /*slots=*/5);
  }
  for (const Shape& s : {odd, wide}) CheckShape<128, false, true>(s, 21, /*slots=*/1);
  CheckShape<32, false, true>(grouped(Shape{2, 40, 16, 20, 20, 4, 4}, 2), 24, 8, /*tail=*/true);
  CheckShape<32, false, true>(grouped(Shape{2, 40, 16, 20, 20, 4, 4}, 2, 1), 24, 8);
}

// The stream-K tail: pieces cut at arbitrary k-tiles (folds restart in each piece, partial
// chunks), several pieces per CTA and per tile, added through the workspace's slots by each
// tile's last warps; with and without whole tiles before it.
TEST(ImplicitGemmWgmmaEmulationTest, StreamKTailMatchesReference) {
  for (int slots : {4, 8, 16}) {
    CheckShape<64, false>(Shape{2, 40, 8, 20, 20, 4, 4}, 11, slots, /*tail=*/true);  // 5 tiles x 20 k-tiles
    CheckShape<32, false>(Shape{2, 40, 8, 20, 20, 4, 4}, 11, slots, /*tail=*/true);
  }
  for (int slots : {8, 16}) {  // BN = 32 with 2 N tiles, the last one partial
    CheckShape<32, false>(Shape{2, 40, 40, 20, 20, 4, 4}, 11, slots, /*tail=*/true);
  }
  CheckShape<128, false>(Shape{1, 64, 136, 10, 12, 3, 3}, 11, 3, true);  // 2 tiles x 18 k-tiles
  CheckShape<128, true>(Shape{2, 256, 136, 8, 12, 1, 1}, 11, 3, true);    // 4 tiles x 8 k-tiles
  CheckShape<64, false>(Shape{1, 3, 40, 12, 12, 3, 3}, 11, 1, false);     // one CTA: whole tiles
}

// Every call must give bitwise the same y, whatever order the persistent CTAs run and finish in.
// The replay runs the CTAs in different orders (the order their tail pieces arrive) with the
// kernel's fp32 arithmetic where pieces meet, and requires the same bits (fp32 atomics into a
// zeroed y, the tail before, fail it on every shape below): the shape measured
// non-deterministic on an H100 (x (16, 32, 32, 32), w (64, 32, 3, 3), stride 2, padding 1, at
// its 132 SMs x 2 CTAs: 32 tiles of 9 k-tiles cut into runs of 4, three pieces a tile), and
// tails of other shapes and widths.
template <int BN, bool kVecA, bool kGeometry>
void ExpectOrderIndependent(const Shape& s, int slots) {
  SCOPED_TRACE(s.ToString() + " slots " + std::to_string(slots));
  const Params p = MakeParams(s, BN, slots);
  ASSERT_GT(p.tail_ctas, 0) << "no stream-K tail: nothing to check";
  std::vector<int> forward(p.grid), backward(p.grid), shuffled(p.grid);
  for (int c = 0; c < p.grid; ++c) forward[c] = c, backward[c] = p.grid - 1 - c;
  shuffled = forward;
  uint64_t state = 12345;  // a fixed Fisher-Yates shuffle (64-bit LCG steps)
  for (int c = p.grid - 1; c > 0; --c) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(shuffled[c], shuffled[static_cast<int>((state >> 33) % static_cast<uint64_t>(c + 1))]);
  }
  std::vector<double> y_forward, y_other;
  CheckShape<BN, kVecA, kGeometry>(s, 31, slots, /*tail=*/true, &forward, &y_forward);
  if (::testing::Test::HasFatalFailure()) return;
  for (const std::vector<int>* order : {&backward, &shuffled}) {
    CheckShape<BN, kVecA, kGeometry>(s, 31, slots, /*tail=*/true, order, &y_other);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(y_other.size(), y_forward.size());
    int64_t differ = 0;
    double worst = 0;
    for (size_t i = 0; i < y_forward.size(); ++i) {
      differ += y_other[i] != y_forward[i];
      worst = std::max(worst, std::abs(y_other[i] - y_forward[i]));
    }
    EXPECT_EQ(differ, 0) << "outputs depend on the order the CTAs finish in (by up to " << worst
                         << ")";
  }
}

TEST(ImplicitGemmWgmmaEmulationTest, TailResultDoesNotDependOnCtaOrder) {
  Shape measured{16, 32, 64, 32, 32, 3, 3};
  measured.pad_top = measured.pad_bottom = measured.pad_left = measured.pad_right = 1;
  measured.stride_h = measured.stride_w = 2;
  ExpectOrderIndependent<64, false, true>(measured, 132 * Config<64>::kMinBlocks);
  ExpectOrderIndependent<64, false, false>(Shape{2, 40, 8, 20, 20, 4, 4}, 16);
  ExpectOrderIndependent<32, false, false>(Shape{2, 40, 40, 20, 20, 4, 4}, 8);
  ExpectOrderIndependent<128, false, false>(Shape{1, 64, 136, 10, 12, 3, 3}, 3);
  ExpectOrderIndependent<128, true, false>(Shape{2, 256, 136, 8, 12, 1, 1}, 3);
}

// An infinity in x reaches the outputs whose window holds it as the infinity fp32 summation
// gives (NaN where products of both signs meet), through the kernel's gathers, its split
// (conv/arch/split_3xtf32.h) on both operands and the tail's pieces; every other output stays
// within the bound. A 1x1 layer (the measured case: one infinity, 64 outputs), with two
// infinities in one pixel and one of each sign in another; and a padded, strided 3x3 layer.
TEST(ImplicitGemmWgmmaEmulationTest, InfinityInXGivesInfinity) {
  const Shape one{2, 64, 64, 8, 8, 1, 1};
  const int64_t plane = 8 * 8;
  const std::vector<std::pair<int64_t, float>> spikes = {
      {5 * plane + 9, INFINITY},                                  // b 0, c 5, pixel 9
      {plane * 64 + 3 * plane + 20, -INFINITY},                   // b 1, c 3, pixel 20
      {7 * plane + 30, INFINITY}, {40 * plane + 30, INFINITY},    // b 0, pixel 30: two
      {11 * plane + 41, INFINITY}, {12 * plane + 41, -INFINITY},  // b 0, pixel 41: both signs
  };
  CheckShape<64, true>(one, 41, 3, {}, nullptr, nullptr, spikes);
  CheckShape<64, false>(one, 41, 8, {}, nullptr, nullptr, spikes);
  Shape geo{2, 8, 24, 15, 13, 3, 3};
  geo.pad_top = geo.pad_bottom = geo.pad_left = geo.pad_right = 1;
  geo.stride_h = geo.stride_w = 2;
  CheckShape<32, false, true>(geo, 43, 5, {}, nullptr, nullptr,
                              {{2 * 15 * 13 + 7 * 13 + 6, INFINITY}, {8 * 195 + 0, -INFINITY}});
}

// The persistent CTAs' static walk: over every CTA, every (tile, k-tile) exactly once, no empty
// unit, tail units exactly on the tail tiles (partial exactly where short of the tile), each
// tail tile's units those PiecesOf names with distinct slots, and every CTA's k-tiles within the
// schedule's bound; for the cnn and KernelBot shapes, on grids of 1, 3, 7 and the H200's slots.
TEST(ImplicitGemmWgmmaPlanTest, WorkUnitWalkCoversEveryKTileOnce) {
  std::vector<Shape> shapes = EdgeShapes();
  for (const Shape& s : KernelBotTestShapes()) shapes.push_back(s);
  for (const Shape& s : KernelBotBenchmarkShapes()) shapes.push_back(s);
  for (const Shape& s : {Shape{32, 64, 64, 56, 56, 3, 3}, Shape{32, 128, 128, 28, 28, 3, 3},
                         Shape{32, 256, 256, 14, 14, 3, 3}, Shape{32, 512, 512, 9, 9, 3, 3},
                         Shape{32, 256, 256, 56, 56, 1, 1}, Shape{8, 3, 64, 224, 224, 7, 7},
                         Shape{1, 128, 128, 256, 256, 3, 3}, Shape{64, 32, 32, 33, 33, 3, 3}}) {
    shapes.push_back(s);
  }
  int tail_shapes = 0;
  for (const Shape& s : shapes) {
    if (!CheckIndexing(s).ok()) continue;
    const int bn = ChooseBN(s);
    for (int slots : {1, 3, 7, 132 * CtasPerSm(bn)}) {
      SCOPED_TRACE(s.ToString() + " slots " + std::to_string(slots));
      const Params p = MakeParams(s, bn, slots);
      if (slots == 132 * CtasPerSm(bn)) tail_shapes += p.tail_ctas > 0;
      const int64_t pairs = int64_t{p.tiles} * p.k_tiles;
      if (pairs > 20000000) continue;  // keep the test quick
      ASSERT_TRUE(p.grid >= 1 && p.grid <= slots);
      ASSERT_TRUE(p.dp_tiles >= 0 && p.dp_tiles <= p.tiles);
      ASSERT_EQ(p.tail_k, int64_t{p.tiles - p.dp_tiles} * p.k_tiles);
      ASSERT_LE(p.tail_ctas, p.grid);
      ASSERT_EQ(p.tail_ctas > 0, p.dp_tiles < p.tiles);
      std::vector<uint8_t> seen(static_cast<size_t>(pairs), 0);
      std::map<int, int> slot_owner;  // the tail's slots: each used by one piece
      std::vector<int> tail_units(static_cast<size_t>(p.tiles - p.dp_tiles), 0);
      const int64_t tail_run = p.tail_ctas > 0 ? (p.tail_k + p.tail_ctas - 1) / p.tail_ctas : 0;
      const int64_t dp_rounds = (p.dp_tiles + p.grid - 1) / p.grid;
      for (int cta = 0; cta < p.grid; ++cta) {
        UnitWalk walk(p, cta);
        WorkUnit wu;
        int64_t work = 0;
        while (walk.Next(p, &wu)) {
          ASSERT_TRUE(wu.m_tile >= 0 && wu.m_tile < p.m_tiles);
          ASSERT_TRUE(wu.n_tile >= 0 && wu.n_tile < p.n_tiles);
          ASSERT_GE(wu.stages, 1);
          ASSERT_GE(wu.kt_begin, 0);
          ASSERT_LE(wu.kt_begin + wu.stages, p.k_tiles);
          const int tile = wu.m_tile * p.n_tiles + wu.n_tile;
          ASSERT_EQ(TailTileOf(p, wu), tile - p.dp_tiles);
          if (tile < p.dp_tiles) ASSERT_FALSE(IsPartial(p, wu)) << "a whole tile cut";
          if (tile >= p.dp_tiles) {
            // The pieces' arithmetic: this CTA among the tile's, its slot its own.
            const TailPieces tp = PiecesOf(p, TailTileOf(p, wu));
            ASSERT_TRUE(cta >= tp.first_cta && cta < tp.first_cta + tp.count) << "cta " << cta;
            ASSERT_EQ(tp.count == 1, !IsPartial(p, wu));
            ASSERT_EQ(TailCtaOf(p, TailTileOf(p, wu) * p.k_tiles + wu.kt_begin), cta);
            const int slot = PartialSlot(cta, TailTileOf(p, wu));
            ASSERT_TRUE(slot >= 0 && slot < PartialSlots(p));
            ASSERT_TRUE(slot_owner.emplace(slot, tile).second) << "slot " << slot << " shared";
            ++tail_units[TailTileOf(p, wu)];
          }
          for (int kt = wu.kt_begin; kt < wu.kt_begin + wu.stages; ++kt) {
            uint8_t& v = seen[static_cast<size_t>(int64_t{tile} * p.k_tiles + kt)];
            ASSERT_EQ(v, 0) << "k-tile computed twice";
            v = 1;
          }
          work += wu.stages;
        }
        ASSERT_LE(work, dp_rounds * p.k_tiles + tail_run) << "cta " << cta;
        // Without a tail the kernel walks WholeTileWalk: the same units.
        if (p.tail_ctas == 0) {
          UnitWalk a(p, cta);
          WholeTileWalk b(p, cta);
          WorkUnit ua, ub;
          bool more;
          do {
            more = a.Next(p, &ua);
            ASSERT_EQ(b.Next(p, &ub), more);
            if (more) {
              ASSERT_EQ(ua.m_tile, ub.m_tile);
              ASSERT_EQ(ua.n_tile, ub.n_tile);
              ASSERT_EQ(ua.kt_begin, ub.kt_begin);
              ASSERT_EQ(ua.stages, ub.stages);
            }
          } while (more);
        }
      }
      for (uint8_t v : seen) ASSERT_EQ(v, 1);
      for (int t = 0; t < p.tiles - p.dp_tiles; ++t) {
        ASSERT_EQ(tail_units[t], PiecesOf(p, t).count) << "tail tile " << t;
      }
    }
  }
  EXPECT_GE(tail_shapes, 3);
}

TEST(ImplicitGemmWgmmaPlanTest, ScheduleChoice) {
  // Whole rounds that fill the GPU, or a last round that nearly does, take no tail.
  EXPECT_EQ(ChooseSchedule(1568, 8, 132).tail_ctas, 0);  // (32,256,256,56,1)
  EXPECT_EQ(ChooseSchedule(264, 36, 132).tail_ctas, 0);  // exactly two rounds
  // A last round that would leave most SMs idle is spread over all of them.
  EXPECT_GT(ChooseSchedule(169, 36, 132).tail_ctas, 0);  // (32,128,128,28,3): 1.3 rounds
  EXPECT_GT(ChooseSchedule(52, 144, 132).tail_ctas, 0);  // (32,512,512,9,3): 52 tiles
  EXPECT_GT(ChooseSchedule(72, 72, 132).tail_ctas, 0);   // (32,256,256,14,3)
  for (int64_t tiles : {1, 7, 52, 100, 132, 133, 500, 5000})
    for (int k_tiles : {1, 2, 3, 4, 7, 8, 9, 36, 144, 4096}) {
      const Schedule c = ChooseSchedule(tiles, k_tiles, 132);
      const Schedule whole{static_cast<int>(std::min<int64_t>(tiles, 132)), static_cast<int>(tiles), 0,
                           static_cast<double>((tiles + 131) / 132) * (k_tiles + kUnitOverhead)};
      EXPECT_TRUE(c.grid >= 1 && c.grid <= 132);
      EXPECT_LE(c.cost, whole.cost);
      if (c.tail_ctas > 0) {
        EXPECT_EQ(c.dp_tiles % 132, 0);
        EXPECT_LT(tiles - c.dp_tiles, 132);
        EXPECT_GE((tiles - c.dp_tiles) * k_tiles / c.tail_ctas, kMinPiece);
      } else {
        EXPECT_EQ(c.dp_tiles, tiles);
        EXPECT_EQ(c.grid, std::min<int64_t>(tiles, 132));
      }
    }
}

TEST(ImplicitGemmWgmmaLayoutTest, DescriptorFields) {
  for (uint32_t addr : {0u, 1024u, 0x1fc00u, 0x37c00u}) {
    const Desc d = Decode(MakeDescriptor(addr));
    EXPECT_EQ(d.start, addr);
    EXPECT_EQ(d.sbo, 1024u);  // 8 rows of 128 bytes between core-matrix groups along N
    EXPECT_EQ(d.lbo, 16u);    // unused with the 128-byte swizzle for K-major; 1 (x16) by convention
    EXPECT_EQ(d.base_offset, 0u);
    EXPECT_EQ(d.swizzle, 1u);  // 128-byte swizzle
    // Bits outside the fields are zero.
    const uint64_t raw = MakeDescriptor(addr);
    EXPECT_EQ(raw & ~((0x3FFFull) | (0x3FFFull << 16) | (0x3FFFull << 32) | (7ull << 49) |
                      (3ull << 62)),
              0u);
    for (int j = 0; j < kK8Steps; ++j) {
      EXPECT_EQ(Decode(DescriptorAtStep(MakeDescriptor(addr), j)).start, addr + 32u * j);
    }
  }
}

// The split filter's tile layout is the swizzled image wgmma reads: through the descriptor
// model, element (n, k) of every k8 step is where BTileOffset put it; BTileCoord inverts it.
TEST(ImplicitGemmWgmmaLayoutTest, SwizzledTileIsWhatWgmmaReads) {
  for (int bn : {64, 128}) {
    std::vector<int> hits(bn * kBK, 0);
    for (int n = 0; n < bn; ++n)
      for (int k = 0; k < kBK; ++k) {
        const int off = BTileOffset(n, k);
        ASSERT_TRUE(off >= 0 && off < bn * kBK);
        ++hits[off];
        int n2, k2;
        BTileCoord(off, &n2, &k2);
        EXPECT_EQ(n2, n);
        EXPECT_EQ(k2, k);
        // Consecutive k in a 16-byte chunk stay consecutive (16-byte copies keep them together).
        if (k % 4) {
          EXPECT_EQ(BTileOffset(n, k), BTileOffset(n, k - 1) + 1);
        }
        const uint32_t base = 0x3000;  // 1024-aligned
        const Desc d = Decode(DescriptorAtStep(MakeDescriptor(base), k / 8));
        EXPECT_EQ(SwizzledAddress(d, n, k % 8), base + 4u * off) << "n " << n << " k " << k;
      }
    for (int h : hits) EXPECT_EQ(h, 1);
  }
}

// Every float of the split filter is written exactly once, with (n, k, plane) where the
// workspace layout (WorkspaceTile, BTileOffset) puts them.
TEST(ImplicitGemmWgmmaLayoutTest, SplitFilterCoversEveryTileOnce) {
  Shape grouped{1, 10, 90, 9, 11, 3, 2};  // 2 groups: K = 30, 45 channels each (1 or 2 N tiles)
  grouped.groups = 2;
  // K = 30: one partial k-tile; Cout = 130: 2 N tiles
  for (const Shape& s : {Shape{1, 5, 130, 9, 11, 3, 2}, grouped}) {
    for (int bn : {32, 64, 128}) {
      SCOPED_TRACE(s.ToString() + " BN " + std::to_string(bn));
      const Params p = MakeParams(s, bn, 1);
      const int64_t total = SplitFilterBytes(s, bn) / 4;
      EXPECT_EQ(total, int64_t{p.n_tiles} * p.k_tiles * 2 * bn * kBK);
      EXPECT_EQ(p.n_tiles, s.groups * ((s.out_per_group() + bn - 1) / bn));
      std::vector<int> seen(static_cast<size_t>(total), 0);
      std::vector<int> channel(static_cast<size_t>(s.out_channels), 0);
      for (int block = 0; block < p.n_tiles * p.k_tiles; ++block) {
        const int nt = block / p.k_tiles, kt = block % p.k_tiles;
        const NTile tile = TileOf(p, bn, nt);
        // Each N tile lies within one group.
        ASSERT_EQ(tile.n0 / p.cout_g, (tile.n_end - 1) / p.cout_g);
        ASSERT_EQ(tile.x0, tile.n0 / p.cout_g * p.cin_g_hw);
        for (int e = 0; e < bn * kBK; ++e) {
          int n, n_end, k;
          int64_t hi_at;
          SplitTarget(p, bn, block, e, &n, &n_end, &k, &hi_at);
          ASSERT_EQ(n_end, tile.n_end);
          const int nl = n - tile.n0;
          ASSERT_TRUE(nl >= 0 && nl < bn && k >= kt * kBK && k < (kt + 1) * kBK);
          if (n < n_end && k < p.k) ++channel[n];
          for (int plane : {0, 1}) {
            const int64_t at =
                WorkspaceTile(bn, p.k_tiles, nt, kt, plane) + BTileOffset(nl, k % kBK);
            EXPECT_EQ(at, hi_at + plane * bn * kBK);
            ASSERT_TRUE(at >= 0 && at < total);
            ++seen[at];
          }
        }
      }
      for (int v : seen) ASSERT_EQ(v, 1);
      for (int v : channel) ASSERT_EQ(v, p.k) << "every filter row split once, whole";
    }
  }
}

// ---- The ring protocol (copy warpgroup and consumers handing slots on through full / empty
// mbarriers), replayed as the kernel's programs under many random interleavings with the
// hardware's phase-parity semantics: every schedule finishes (no deadlock), a slot is written only
// when no consumer still reads it (the wgmma of its previous stage are complete), and a consumer
// reads a stage only once every copy thread's copies of it have landed.
struct Mbarrier {
  int count = 0, pending = 0, phase = 0;  // phase: completed phases
  void Init(int c) { count = pending = c; }
  void Arrive() {
    if (--pending == 0) {
      ++phase;
      pending = count;
    }
  }
  // mbarrier.try_wait.parity: true once the phase of that parity has completed, i.e. while the
  // current (incomplete) phase has the other parity.
  bool Done(int parity) const { return (phase & 1) != parity; }
};

// units: the stages of each work unit of the CTA, in order (the copy warpgroup streams them as
// one sequence; the consumers end each unit with wait_group 0 and arrive on its last stage's
// "empty" there, and skip the arrival at the next unit's first stage). The copies land on their
// own, in any order across threads (each thread's cp.async arrivals in its issue order), and
// complete "full" themselves: per stage, one arrival per copy thread when its gathers land, copy
// thread 0's expect-tx arrival at issue, and the bulk copy's bytes (modelled as one more
// arrival). kWaitEmpty = false models a copy warpgroup that forgets "empty" (the model must
// catch it). Returns the first violation, or "" if every schedule step was safe and it finished.
template <int kStages, bool kWaitEmpty = true>
std::string ReplayRingUnits(const std::vector<int>& units, int copiers, int consumers,
                            uint64_t seed) {
  int n = 0;
  for (int len : units) n += len;
  std::vector<Mbarrier> full(kStages), empty(kStages);
  for (int s = 0; s < kStages; ++s) {
    full[s].Init(copiers + 2);  // kFullArrivals = copiers + 1, plus the bulk copy's bytes
    empty[s].Init(consumers);
  }
  struct Copier {
    int i = 0;                   // next stage to issue
    std::vector<int> in_flight;  // its gathers issued, not landed (in order)
    bool done = false;
  };
  struct Consumer {
    int i = 0;       // stage (over all units)
    int unit = 0;    // current unit
    int in_unit = 0;  // its stages consumed
    std::vector<int> reading;  // stages whose wgmma may still read their slot
    bool done = false;
  };
  std::vector<Copier> cp(copiers);
  std::vector<Consumer> cs(consumers);
  std::vector<int> bulk_in_flight;            // stages whose bulk copy has not landed
  std::vector<int> slot_stage(kStages, -1);  // the stage whose copies were issued into the slot
  auto readers_of = [&](int slot) {
    int r = 0;
    for (const Consumer& c : cs)
      for (int st : c.reading) r += RingSlot<kStages>(st) == slot;
    return r;
  };
  uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&]() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  std::string error;
  // One action of actor `who` (copiers, then consumers, then the memory system, which lands one
  // copy in flight); false if it is blocked or done.
  auto step = [&](int who) -> bool {
    if (who < copiers) {
      Copier& c = cp[who];
      if (c.done) return false;
      if (c.i == n) {  // exits with its copies possibly in flight (the consumers outlive them)
        c.done = true;
        return true;
      }
      const int slot = RingSlot<kStages>(c.i);
      if (kWaitEmpty && c.i >= kStages && !empty[slot].Done(EmptyParity<kStages>(c.i))) return false;
      if (readers_of(slot) != 0) error = "stage " + std::to_string(c.i) + " overwrites a slot being read";
      slot_stage[slot] = c.i;
      if (who == 0) {  // expect-tx arrival, then the bulk copy
        full[slot].Arrive();
        bulk_in_flight.push_back(c.i);
      }
      c.in_flight.push_back(c.i);  // its gathers, then its cp.async arrival
      ++c.i;
      return true;
    }
    if (who < copiers + consumers) {
      Consumer& c = cs[who - copiers];
      if (c.done) return false;
      if (c.in_unit == units[c.unit]) {  // the unit's end: wait_group 0, free the last stage
        if (c.reading.size() != 1u || c.reading.front() != c.i - 1) error = "unit end out of order";
        c.reading.clear();
        empty[RingSlot<kStages>(c.i - 1)].Arrive();
        c.in_unit = 0;
        if (++c.unit == static_cast<int>(units.size())) c.done = true;
        return true;
      }
      const int slot = RingSlot<kStages>(c.i);
      if (!full[slot].Done(FullParity<kStages>(c.i))) return false;
      if (slot_stage[slot] != c.i) error = "reads a slot holding another stage";
      for (const Copier& q : cp) {
        for (int st : q.in_flight) {
          if (st == c.i) error = "reads stage " + std::to_string(c.i) + " before its gathers landed";
        }
      }
      for (int st : bulk_in_flight) {
        if (st == c.i) error = "reads stage " + std::to_string(c.i) + " before its bulk copy landed";
      }
      c.reading.push_back(c.i);  // the first k8 step's wgmma issued
      if (c.in_unit > 0) {       // wait_group 1 after it: stage i - 1 (same unit) is complete
        if (c.reading.front() != c.i - 1) error = "wgmma completion out of order";
        c.reading.erase(c.reading.begin());
        empty[RingSlot<kStages>(c.i - 1)].Arrive();
      } else if (c.reading.size() != 1u) {
        error = "a unit starts before the previous one is complete";
      }
      ++c.i;
      ++c.in_unit;
      return true;
    }
    // The memory system: land one copy in flight, chosen at random.
    std::vector<int> candidates;  // copier index, or copiers for a bulk copy
    for (int q = 0; q < copiers; ++q) {
      if (!cp[q].in_flight.empty()) candidates.push_back(q);
    }
    if (!bulk_in_flight.empty()) candidates.push_back(copiers);
    if (candidates.empty()) return false;
    const int q = candidates[next() % candidates.size()];
    if (q == copiers) {
      const size_t k = next() % bulk_in_flight.size();
      full[RingSlot<kStages>(bulk_in_flight[k])].Arrive();
      bulk_in_flight.erase(bulk_in_flight.begin() + k);
    } else {
      full[RingSlot<kStages>(cp[q].in_flight.front())].Arrive();
      cp[q].in_flight.erase(cp[q].in_flight.begin());
    }
    return true;
  };
  const int actors = copiers + consumers + 1;
  for (int guard = 0; guard < 100000; ++guard) {
    bool all_done = true;
    for (const Copier& c : cp) all_done &= c.done;
    for (const Consumer& c : cs) all_done &= c.done;
    if (all_done) {
      // The consumers waited for every stage: nothing can still be in flight when they are done.
      bool gathers_landed = true;
      for (const Copier& c : cp) gathers_landed &= c.in_flight.empty();
      if (!bulk_in_flight.empty() || !gathers_landed) return "a copy still in flight at exit";
      return error;
    }
    // A random runnable actor: try them from a random start.
    const int start = static_cast<int>(next() % actors);
    bool moved = false;
    for (int d = 0; d < actors && !moved; ++d) moved = step((start + d) % actors);
    if (!moved) return "deadlock";
    if (!error.empty()) return error;
  }
  return "no progress";
}

template <int kStages, bool kWaitEmpty = true>
std::string ReplayRing(int n, int copiers, int consumers, uint64_t seed) {
  return ReplayRingUnits<kStages, kWaitEmpty>({n}, copiers, consumers, seed);
}

template <int kStages>
void CheckCursor() {
  RingCursor<kStages> c;
  for (int g = 0; g < 1000; ++g, c.Next()) {
    ASSERT_EQ(c.slot, RingSlot<kStages>(g)) << "stage " << g;
    ASSERT_EQ(c.parity, FullParity<kStages>(g)) << "stage " << g;
    if (g >= kStages) {
      ASSERT_EQ(c.parity ^ 1, EmptyParity<kStages>(g)) << "stage " << g;
    }
    if (g >= 1) {
      ASSERT_EQ(c.prev, RingSlot<kStages>(g - 1)) << "stage " << g;
    }
  }
}
// The in-kernel split (kSplitB, SplitTileToShared): copy thread t's j-th element of a stage,
// e = t + j * kCopyThreads, lands at hi_at - WorkspaceTile(...) of the slot: every offset of the
// (BN x kBK) tile exactly once, holding the element the bulk copy of the split kernel's tile
// would have put there (BTileCoord), for every N tile and k-tile.
TEST(ImplicitGemmWgmmaLayoutTest, InKernelSplitCoversEachTileOnce) {
  const Shape s{1, 5, 130, 9, 11, 3, 2};  // K = 30: one partial k-tile; Cout = 130
  const Shape deep{1, 40, 70, 9, 11, 3, 3};  // K = 360: 12 k-tiles
  for (const Shape& shape : {s, deep}) {
    for (int bn : {32, 64, 128}) {
      SCOPED_TRACE(shape.ToString() + " BN " + std::to_string(bn));
      const Params p = MakeParams(shape, bn, 1);
      const int per_thread = bn * kBK / kCopyThreads;
      ASSERT_EQ(per_thread * kCopyThreads, bn * kBK);
      for (int nt = 0; nt < p.n_tiles; ++nt) {
        for (int kt = 0; kt < p.k_tiles; ++kt) {
          std::vector<int> seen(static_cast<size_t>(bn * kBK), 0);
          const int64_t tile_at = WorkspaceTile(bn, p.k_tiles, nt, kt, 0);
          for (int t = 0; t < kCopyThreads; ++t) {
            for (int j = 0; j < per_thread; ++j) {
              int n, n_end, k;
              int64_t hi_at;
              SplitFilterTarget<false>(p, bn, nt * p.k_tiles + kt, t + j * kCopyThreads, &n,
                                       &n_end, &k, &hi_at);
              const int64_t off = hi_at - tile_at;
              ASSERT_TRUE(off >= 0 && off < bn * kBK) << off;
              ++seen[off];
              int tn, tk;
              BTileCoord(static_cast<int>(off), &tn, &tk);
              ASSERT_EQ(n, nt * bn + tn);
              ASSERT_EQ(k, kt * kBK + tk);
            }
          }
          for (int c : seen) ASSERT_EQ(c, 1);
        }
      }
    }
  }
}

TEST(ImplicitGemmWgmmaRingTest, CursorStepsThroughTheRing) {
  CheckCursor<Config<64>::kStages>();
  CheckCursor<Config<128>::kStages>();
}

TEST(ImplicitGemmWgmmaRingTest, ProtocolIsLiveAndSafe) {
  for (int n : {1, 2, 3, 4, 5, 7, 8, 13, 36}) {
    for (uint64_t seed = 1; seed <= 40; ++seed) {
      ASSERT_EQ((ReplayRing<Config<64>::kStages>(n, 2, 3, seed)), "") << "n " << n << " seed " << seed;
      ASSERT_EQ((ReplayRing<Config<128>::kStages>(n, 3, 2, seed)), "") << "n " << n << " seed " << seed;
    }
  }
}

// Persistent CTAs: the ring runs on across work units of random lengths (1-stage units, units
// shorter and longer than the ring), each unit ending with its own drain.
TEST(ImplicitGemmWgmmaRingTest, ProtocolAcrossWorkUnitsIsLiveAndSafe) {
  uint64_t rng = 12345;
  auto next = [&]() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::vector<int> units(1 + next() % 6);
    for (int& len : units) len = 1 + static_cast<int>(next() % 9);
    ASSERT_EQ((ReplayRingUnits<Config<64>::kStages>(units, 2, 3, seed)), "") << "seed " << seed;
    ASSERT_EQ((ReplayRingUnits<Config<128>::kStages>(units, 3, 2, seed)), "") << "seed " << seed;
  }
  for (const std::vector<int>& units :
       {std::vector<int>{1, 1, 1, 1, 1, 1, 1}, std::vector<int>{12, 12, 12, 12},
        std::vector<int>{29, 29, 28}, std::vector<int>{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}}) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      ASSERT_EQ((ReplayRingUnits<Config<64>::kStages>(units, 2, 2, seed)), "") << "seed " << seed;
      ASSERT_EQ((ReplayRingUnits<Config<128>::kStages>(units, 2, 2, seed)), "") << "seed " << seed;
    }
  }
}

// The model is strict enough to notice a copy warpgroup that does not wait for "empty" (it
// overwrites a slot whose wgmma may still read it) under some schedule.
TEST(ImplicitGemmWgmmaRingTest, ModelCatchesAnOverwrite) {
  bool caught = false;
  for (uint64_t seed = 1; seed <= 50 && !caught; ++seed) {
    caught = ReplayRing<3, /*kWaitEmpty=*/false>(12, 1, 2, seed).find("overwrites") !=
             std::string::npos;
  }
  EXPECT_TRUE(caught);
}

// The copies' shared-memory writes: a warp's scalar copy (one k row pair, one column step)
// hits 32 distinct banks; a warp's vector copy writes 512 contiguous bytes.
TEST(ImplicitGemmWgmmaLayoutTest, CopyWritesAreBankConflictFree) {
  const Params p = MakeParams(Shape{2, 8, 8, 20, 20, 3, 3}, 64, 1);
  for (int warp = 0; warp < kCopyThreads / 32; ++warp) {
    std::vector<std::vector<int>> scalar(32), vec(32);
    for (int lane = 0; lane < 32; ++lane) {
      AGather<false> g;
      g.Init(p, 0, 32 * warp + lane);
      g.ForEach(p, 0, [&](int si, int, bool) { scalar[lane].push_back(si); });
      AGather<true> v;
      v.Init(p, 0, 32 * warp + lane);
      v.ForEach(p, 0, [&](int si, int, bool) { vec[lane].push_back(si); });
    }
    for (size_t c = 0; c < scalar[0].size(); ++c) {
      uint32_t banks = 0;
      for (int lane = 0; lane < 32; ++lane) banks |= 1u << (scalar[lane][c] % 32);
      EXPECT_EQ(banks, 0xFFFFFFFFu) << "warp " << warp << " copy " << c;
    }
    for (size_t c = 0; c < vec[0].size(); ++c)
      for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(vec[lane][c], vec[0][c] + 4 * lane);
  }
}

// Every A fragment load of a warp (one register, one k8 step) reads 32 distinct banks.
TEST(ImplicitGemmWgmmaLayoutTest, AFragmentLoadsAreBankConflictFree) {
  for (int wg = 0; wg < 2; ++wg)
    for (int warp = 0; warp < 4; ++warp)
      for (int j = 0; j < kK8Steps; ++j)
        for (int reg = 0; reg < 4; ++reg) {
          uint32_t banks = 0;
          for (int lane = 0; lane < 32; ++lane) banks |= 1u << (AFragIndex(wg, warp, j, lane, reg) % 32);
          EXPECT_EQ(banks, 0xFFFFFFFFu) << "wg " << wg << " warp " << warp << " reg " << reg;
        }
}

TEST(ImplicitGemmWgmmaPlanTest, ShapeLimits) {
  ExpectCommonShapeLimits("implicit_gemm_wgmma");
  const Algorithm* a = Registry::Global().Find("implicit_gemm_wgmma");
  ASSERT_NE(a, nullptr);
  // A split filter beyond 2 GiB of workspace.
  EXPECT_EQ(a->CanImplement(Shape{1, 4096, 8192, 64, 64, 3, 3}).code(),
            absl::StatusCode::kResourceExhausted);
  // The tile width follows Cout.
  EXPECT_EQ(ChooseBN(Shape{1, 3, 32, 8, 8, 3, 3}), 32);
  EXPECT_EQ(ChooseBN(Shape{1, 3, 33, 8, 8, 3, 3}), 64);
  EXPECT_EQ(ChooseBN(Shape{1, 3, 64, 8, 8, 3, 3}), 64);
  EXPECT_EQ(ChooseBN(Shape{1, 3, 65, 8, 8, 3, 3}), 128);
}

// The scalar gather's unmasked path (interior stages) issues exactly the masked path's copies, and
// is taken on every stage but the last m-tile's and the last k-tile.
TEST(ImplicitGemmWgmmaLayoutTest, UnmaskedGatherMatchesMasked) {
  // K = 72, 63 and 260: partial last k-tiles; M not a multiple of kBM.
  for (const Shape& s : {Shape{2, 8, 8, 20, 20, 3, 3}, Shape{1, 3, 5, 300, 9, 3, 7},
                         Shape{3, 13, 7, 19, 23, 5, 4}}) {
    const Params p = MakeParams(s, 64, 3);
    int interior = 0;
    for (int m_tile = 0; m_tile < p.m_tiles; ++m_tile) {
      for (int t = 0; t < kCopyThreads; ++t) {
        AGather<false, false> masked;
        AGather<false, true> unmasked;
        masked.Init(p, m_tile * kBM, t);
        unmasked.Init(p, m_tile * kBM, t);
        for (int kt = 0; kt < p.k_tiles; ++kt) {
          std::vector<std::array<int, 3>> a, b;
          masked.ForEach(p, kt, [&](int si, int g, bool v) { a.push_back({si, g, v}); });
          unmasked.ForEach(p, kt, [&](int si, int g, bool v) { b.push_back({si, g, v}); });
          ASSERT_EQ(a, b) << s.ToString() << " m-tile " << m_tile << " thread " << t << " k-tile "
                          << kt;
          bool all = true;
          for (const auto& c : a) all &= c[2] != 0;
          interior += all && (kt + 1) * kBK <= p.k;
        }
      }
    }
    EXPECT_GT(interior, 0) << s.ToString();
  }
}

TEST(ImplicitGemmWgmmaPlanTest, VectorGatherConditions) {
  const Params p = MakeParams(Shape{1, 8, 8, 16, 16, 1, 1}, 64, 1);
  EXPECT_TRUE(CanVectorizeA(p, 256));
  EXPECT_FALSE(CanVectorizeA(p, 260));
  EXPECT_FALSE(CanVectorizeA(MakeParams(Shape{1, 8, 8, 16, 18, 1, 1}, 64, 1), 0));  // W % 4 != 0
  EXPECT_FALSE(CanVectorizeA(MakeParams(Shape{1, 8, 8, 16, 16, 1, 2}, 64, 1), 0));  // Kw != 1
}

// ---- The accuracy model of the kernel's arithmetic (implicit_gemm_3xtf32's argument, replayed
// with this kernel's fold length: SplitDotModel in conv/testing/cpu_replay/tf32_model.h), on the
// testbed's seeded inputs.
DotModelError Model(int k, int fold_terms, int samples, uint64_t seed) {
  const std::vector<float> x = RandomTensor(seed, kInputTensor, int64_t{k} * samples);
  const std::vector<float> w = RandomTensor(seed, kFilterTensor, int64_t{k} * samples);
  return SplitDotModel(x.data(), w.data(), k, samples, fold_terms);
}

TEST(ImplicitGemmWgmmaAccuracyModel, BlockedAccumulationMeetsTheBar) {
  constexpr int kFoldTerms = kFoldTiles * kBK;
  // The longest KernelBot reduction (128 channels, 32x32) and the longest "cnn" one (512, 3x3).
  for (int k : {131072, 4608}) {
    const int samples = k > 10000 ? 32 : 300;
    const DotModelError folded = Model(k, kFoldTerms, samples, 1);
    std::printf("K=%-7d fold every %d terms: rms %.3e worst %.3e\n", k, kFoldTerms, folded.rms,
                folded.worst);
    // Outputs near zero have the tightest tolerance, 1e-3.
    EXPECT_LT(4 * folded.rms, 1e-3) << "K=" << k;
    EXPECT_LT(folded.worst, 1e-3) << "K=" << k;
  }
}

}  // namespace
}  // namespace implicit_gemm_wgmma_internal
}  // namespace conv2d
