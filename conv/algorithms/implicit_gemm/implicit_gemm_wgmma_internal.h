// implicit_gemm_wgmma's index algebra, in plain C++ that compiles for the device and the host, so
// that implicit_gemm_wgmma_cpu_test replays the kernel's data movement (gathers, the filter's
// split-and-swizzle into the workspace, the stage copies, the wgmma operand maps, the epilogue)
// against the fp64 reference without a GPU. Not part of the library's API.
//
// The GEMM view is implicit_gemm_3xtf32's (implicit_gemm_view.h): M = output pixels, N = output
// channels, K = Cin*Kh*Kw, A[m][k] = x gathered, B[k][n] = w[n][k].
//
// A CTA computes kBM x BN tiles (persistent: it walks a static list of work units, UnitWalk) with
// three warpgroups: two consumer warpgroups (0 and 1), each owning 64 rows (one wgmma M extent)
// and all BN columns, and one copy warpgroup (2) that only issues the stage copies,
// handing stages to the consumers round a ring of kStages through "full" and "empty" mbarriers
// (The ring, below).
//  - A (pixels x k) is gathered into shared memory as [kBK][kAStride] (k rows of pixels, the
//    layout implicit_gemm_3xtf32 uses), and fed to wgmma from registers: each consumer thread
//    loads its four fragment values per k8 step, splits them into TF32 hi/lo once, and both
//    halves go to wgmma as register operands. Each A element is loaded and split once per CTA
//    (not once per warp of an N split, as with mma.sync).
//  - B (the filter) is split once per call by a small kernel into hi and lo TF32 planes in the
//    workspace, already in the shared-memory image wgmma reads: per (N tile, k-tile) a BN x kBK
//    K-major tile with the 128-byte swizzle, hi then lo. The stage copy is one bulk copy of
//    those contiguous bytes (the copy engine; x's gather is per-thread cp.async).
//  - The tiles that would leave SMs idle in a last round are split along K evenly over all CTAs
//    (ChooseSchedule). A piece that is not a whole tile leaves its fp32 sums in a workspace slot
//    of its own; the warp that arrives last at the tile adds the pieces' sums in k order and
//    stores y ("The tail's pieces", below). The order of the additions is fixed by the shape and
//    the grid, not by which CTA finishes first: every call gives the same bits. (fp32 atomics
//    into a zeroed y, as before, made the sum's order the arrival order: results varied by a few
//    ulps from call to call.)
#ifndef CONV2D_CONV_IMPLICIT_GEMM_WGMMA_INTERNAL_H_
#define CONV2D_CONV_IMPLICIT_GEMM_WGMMA_INTERNAL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_view.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/host_device.h"
#include "conv/shape.h"

namespace conv2d {
namespace implicit_gemm_wgmma_internal {

using implicit_gemm_view::CanVectorizeA;  // Kw = 1, W % 4 = 0, x 16-byte aligned
using implicit_gemm_view::PixelBase;
using implicit_gemm_view::YRowBase;

constexpr int kBM = 128;             // output pixels per CTA: two warpgroups of 64 rows
constexpr int kBK = 32;              // reduction terms per stage: one 128-byte swizzle row of fp32
constexpr int kConsumerThreads = 256;  // warpgroups 0 and 1: A split, wgmma, fold, epilogue
constexpr int kCopyThreads = 128;      // warpgroup 2: the stage copies
constexpr int kThreads = kConsumerThreads + kCopyThreads;
constexpr int kWarpgroupRows = 64;   // the wgmma M extent
constexpr int kK8Steps = kBK / 8;    // wgmma .tf32 instructions have K = 8
// The accumulators are folded every kFoldTiles k-tiles (128 terms), as in implicit_gemm_3xtf32:
// the same error model applies (three TF32 products per 8 terms into an fp32 accumulator that
// may round toward zero, then an IEEE fp32 fold).
constexpr int kFoldTiles = 4;
static_assert(kFoldTiles * kBK == 128, "fold length of the verified accuracy model");

// A stage: [kBK][kAStride] floats. A fragment register is read at (k0+tig)*kAStride + m0+gid over
// the lanes (gid = lane/4, tig = lane%4): kAStride = 8 (mod 32) puts the 32 lanes in 32 banks.
constexpr int kAStride = kBM + 8;  // 136
constexpr int kAStageFloats = kBK * kAStride;
static_assert(kAStride % 32 == 8, "bank-conflict-free A fragment loads");
static_assert(kAStageFloats * 4 % 1024 == 0, "stages stay 1024-byte aligned");

// The tile configuration for a BN (32, 64 or 128): BN = 128 holds 64 accumulators + 64 fold sums
// per consumer thread and 4 stages (196 KiB, one CTA per SM); BN = 64 fits two CTAs per SM with 3
// stages, BN = 32 (Cout <= 32, where a 64 tile would be half padding) two with 4.
template <int BN>
struct Config {
  static_assert(BN == 32 || BN == 64 || BN == 128, "BN is 32, 64 or 128");
  static constexpr int kBN = BN;
  static constexpr int kStages = BN == 64 ? 3 : 4;
  static constexpr int kMinBlocks = BN == 128 ? 1 : 2;
  // Registers per thread (setmaxnreg): the launch gives each of the 384 threads 65536 /
  // (384 * kMinBlocks) rounded down to 8 (168, 80, 80); the copy warpgroup gives back down to
  // kCopyRegs and the consumers take up to kConsumerRegs, within the CTA's allocation.
  static constexpr int kLaunchRegs = 65536 / (kThreads * kMinBlocks) / 8 * 8;
  static constexpr int kCopyRegs = BN == 128 ? 56 : 40;
  static constexpr int kConsumerRegs = BN == 128 ? 224 : 96;
  static_assert(kCopyThreads * kCopyRegs + kConsumerThreads * kConsumerRegs <=
                    kThreads * kLaunchRegs, "setmaxnreg within the CTA's registers");
  static constexpr int kBTileFloats = BN * kBK;  // one plane (hi or lo) of one k-tile
  static constexpr int kBTileBytes = kBTileFloats * 4;
  static constexpr int kStageBytes = 2 * kBTileBytes + kAStageFloats * 4;  // B hi, B lo, A
  // The ring's mbarriers, after the stages: full[kStages], then empty[kStages].
  static constexpr int kBarrierBytes = 2 * kStages * 8;
  // Dynamic shared memory: the stages, the barriers, plus slack to align the base to 1024 bytes
  // (the 128-byte swizzle pattern repeats every 8 rows = 1024 bytes and is computed from address
  // bits).
  static constexpr int kSmemBytes = kStages * kStageBytes + kBarrierBytes + 1024;
  static constexpr int kAccRegs = BN / 2;  // m64nBN f32 accumulators per consumer thread
  // Whether a unit's epilogue is deferred into the next unit's first k-tile, overlapping the
  // tensor core's work (it keeps acc, sum and the store addresses live together: 96 registers
  // are too few for that at BN = 64).
  static constexpr bool kDeferStores = BN != 64;
  // Whether the scalar x gather has its unmasked path for interior stages (AGather). At BN = 32
  // and 64 the consumers wait for the copy warpgroup, whose issue rate sets the pace (round 63:
  // 21% of the warps' stall samples on "full", the copy warps busy issuing); at BN = 128 the
  // consumers set it, and the longer code measured ~8% slower.
  static constexpr bool kUnmaskedGather = BN != 128;
  static_assert(kBTileBytes % 1024 == 0 && kStageBytes % 1024 == 0, "1024-byte aligned tiles");
};
static_assert(Config<128>::kSmemBytes <= 227 * 1024, "one CTA per SM");
static_assert(2 * (Config<64>::kSmemBytes + 1024) <= 228 * 1024, "two CTAs per SM");
static_assert(2 * (Config<32>::kSmemBytes + 1024) <= 228 * 1024, "two CTAs per SM");

// CTAs that fit on one SM at once for a BN (32, 64 or 128).
inline int CtasPerSm(int bn) {
  return bn == 128 ? Config<128>::kMinBlocks
                   : bn == 64 ? Config<64>::kMinBlocks : Config<32>::kMinBlocks;
}

// ---- The ring (one pass over all the k-tiles of all the CTA's work units, in order: stage i is
// the CTA's i-th k-tile overall, across unit boundaries): stage i lives in slot i % kStages.
// full[slot] completes one phase per use of the slot (kFullArrivals: every copy thread's cp.async
// arrival, which happens once its gathers of the stage have landed, plus copy thread 0's
// arrival that announces the bulk copy's bytes; the phase also waits for those bytes),
// empty[slot] likewise (count kConsumerThreads: every consumer thread arrives once its wgmma
// reading the stage are complete). The forward needs no proxy fence: B travels through the async
// proxy from the bulk copy to wgmma, and A is read by the consumers' ordinary loads, not by
// wgmma. (wgrad's B is written by the consumers' split, st.shared, then fenced for wgmma.)
// RingSlot, FullParity and EmptyParity define the positions; the kernel steps them with
// RingCursor (checked against them in the CPU test). Use u = i / kStages of a slot waits for phase u of
// full (parity u & 1); the copies of use u >= 1 wait for phase u - 1 of empty.
constexpr int kFullArrivals = kCopyThreads + 1;
// The kernels that split the filter tile themselves (kSplitB) have no bulk copy: every copy
// thread arrives twice a phase, once by cp.async (its gathers) and once after its filter stores
// and the proxy fence that shows them to wgmma.
constexpr int kSplitBFullArrivals = 2 * kCopyThreads;
// wgrad: each copy thread's cp.async arrival (the consumers split dy after "full").
constexpr int kWgradFullArrivals = kCopyThreads;
// The in-kernel split where a schedule of whole tiles has at most this many M tiles (each splits
// the filter again: M <= 512 output pixels). Measured (H100, round 91): equal to the split
// kernel's device time at 2 M tiles (0.009 and 0.008 ms), 1.4x slower at 18 (0.017 / 0.012).
constexpr int kSplitBMaxMTiles = 4;
template <int kStages>
CONV2D_HOST_DEVICE_INLINE int RingSlot(int i) { return i % kStages; }
template <int kStages>
CONV2D_HOST_DEVICE_INLINE int FullParity(int i) { return (i / kStages) & 1; }
template <int kStages>
CONV2D_HOST_DEVICE_INLINE int EmptyParity(int i) { return (i / kStages - 1) & 1; }  // i >= kStages

// The ring position of stage g, stepped from one stage to the next (the kernel's loops carry it
// instead of dividing g by kStages every k-tile, which cost ~10 instructions per k-tile).
template <int kStages>
struct RingCursor {
  int slot = 0;            // RingSlot(g)
  int parity = 0;          // FullParity(g); EmptyParity(g) = parity ^ 1 for g >= kStages
  int prev = kStages - 1;  // RingSlot(g - 1)
  CONV2D_HOST_DEVICE_INLINE void Next() {
    prev = slot;
    if (++slot == kStages) {
      slot = 0;
      parity ^= 1;
    }
  }
};

// ---- Shape parameters (32-bit: CheckIndexing bounds every index the kernel forms).
struct Params {
  int cin = 0, cout = 0, h = 0, w = 0, kh = 0, kw = 0;
  int ow = 0;       // out_w
  int hw = 0;       // h*w
  int cin_hw = 0;   // cin*h*w
  int p = 0;        // out_h*out_w
  int m = 0;        // batch*p
  int k = 0;        // cin*kh*kw
  int k_tiles = 0;  // ceil(k / kBK)
  int n_tiles = 0;  // groups * n_tiles_g
  int m_tiles = 0;  // ceil(m / kBM)
  int tiles = 0;    // m_tiles * n_tiles, numbered m_tile * n_tiles + n_tile
  // The schedule (ChooseSchedule, UnitWalk): grid persistent CTAs; tiles [0, dp_tiles) whole,
  // tile c, c + grid, ... by CTA c with plain stores; the k-tiles of the other tiles ("the
  // tail", tail_k of them, tile by tile) cut into tail_ctas equal runs, one per CTA 0..tail_ctas-1,
  // whose pieces meet in the workspace (The tail's pieces).
  int grid = 0;
  int dp_tiles = 0;
  int tail_ctas = 0;
  int tail_k = 0;  // (tiles - dp_tiles) * k_tiles
  FastDiv div_p, div_ow, div_khkw, div_kw;
  // The geometry (implicit_gemm_view.h), after the fields above so that the basic kernels'
  // parameter offsets stay as they were.
  int sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, dh_w = 0;
  bool geometry = false;
  // Groups: one GEMM per group (K = cin_g*kh*kw, N = cout_g), its channels tiled on their own,
  // so that N tile nt belongs to group nt / n_tiles_g (NTileOf). groups = 1: cout_g = cout.
  // Grouped shapes run the geometry gather (geometry = true) and kernels built with kGrouped.
  int groups = 1;
  int cout_g = 0;     // output channels per group
  int n_tiles_g = 0;  // ceil(cout_g / BN)
  int cin_g_hw = 0;   // (cin / groups)*h*w: x's offset from one group's channels to the next
  // The call's bias [cout] or null, set per call by the runner (the plan's Params hold null):
  // the epilogue adds it to a tile's sums (a tail tile's: once its pieces are added).
  const float* bias = nullptr;
  // The tail's workspace, set per call by the runner (null without a tail): a counter per tail
  // tile and consumer warp, which the split kernel zeroes, and the pieces' slots
  // (TailWorkspaceBytes).
  int* tail_counters = nullptr;
  float* tail_partials = nullptr;
  // wgrad (implicit_gemm_wgmma_wgrad.h), after the forward's fields: m, k, k_tiles, m_tiles,
  // n_tiles and tiles above are then wgrad's GEMM's, and its units are tiles x slices.
  int slices = 1, slice_tiles = 0, units = 0;
  int fold_tiles = kFoldTiles;  // k-tiles per accumulator chunk (wgrad_split::ChunkTerms)
  int red = 0;           // one filter's taps, (Cin/groups)*kh*kw: dw's row length
  int cg = 0;            // input channels per group
  int cout_p = 0;        // cout*out_h*out_w: one dy image
  int slice_stride = 0;  // floats between two slices' partial dw (cout*red)
  const float* centers = nullptr;  // per call where x is centred: its channel centres
};

// The output channels [n0, n_end) of N tile nt and the x offset x0 of its group's first input
// channel (0 without groups). kGrouped = false: the ungrouped kernels' arithmetic, without the
// group's division (those kernels measured 5-20% slower with it: PERF.md round 89).
struct NTile {
  int n0 = 0, n_end = 0, x0 = 0;
};
template <bool kGrouped>
CONV2D_HOST_DEVICE_INLINE NTile NTileOf(const Params& p, int bn, int nt) {
  if (!kGrouped) {
    const int first = nt * bn;
    return NTile{first, first + bn < p.cout ? first + bn : p.cout, 0};
  }
  const int g = nt / p.n_tiles_g;
  const int first = g * p.cout_g + (nt - g * p.n_tiles_g) * bn;
  const int group_end = (g + 1) * p.cout_g;
  return NTile{first, first + bn < group_end ? first + bn : group_end, g * p.cin_g_hw};
}

// BN for a shape: the smallest of 32, 64, 128 that holds a group's output channels, else 128 (a
// larger tile would be half padding).
inline int ChooseBN(const Shape& s) {
  const int64_t n = s.out_per_group();
  return n <= 32 ? 32 : n <= 64 ? 64 : 128;
}
absl::Status CheckIndexing(const Shape& s);
// The schedule for `slots` CTAs at once (SMs x CTAs per SM, at most kMaxSlots); see Params.
// Its 32-bit indices: tiles + slots (CheckIndexing) and the tail's k-tiles, fewer than slots x
// k_tiles (k_tiles <= 2^13 by the reduction limit).
constexpr int kMaxSlots = 1 << 12;
Params MakeParams(const Shape& s, int bn, int slots);
// How much cheaper the tail must model to be taken: 5% at BN = 128; 15% at BN = 64, whose tail
// kernels spill a few registers of their 96 (28 bytes) and measured ~8% short of the model's
// gain (round 45). BN = 32 keeps BN = 64's margin: its tail kernels do not spill, but their gain
// against the model is unmeasured.
inline double TailMargin(int bn) { return bn == 128 ? 0.95 : 0.85; }
int64_t NumTiles(const Shape& s, int bn);

// ---- The schedule of the persistent CTAs. Whole tiles only (CTA c takes tiles c, c + slots, ...)
// leaves SMs idle in the last round when tiles % slots is small (169 tiles on 132 SMs: the
// second round has 37). So only whole rounds of tiles are handed out whole; the tail's k-tiles
// are spread evenly over the CTAs ("stream-K": each CTA a run of about tail_k / tail_ctas
// k-tiles, in pieces cut at tile boundaries, their partial sums added into a zeroed y). The cost
// model counts k-tile times of one CTA: the longest CTA's k-tiles plus kUnitOverhead per unit or
// piece (its fill, drain and epilogue). Runs are at least kMinPiece k-tiles.
constexpr int kUnitOverhead = 2;
constexpr int kMinPiece = 4;
struct Schedule {
  int grid = 0, dp_tiles = 0, tail_ctas = 0;
  double cost = 0;  // in k-tile times of one CTA
};
// margin: the tail's modelled cost must be below margin x whole tiles' (the pieces' trips
// through the workspace are not in the model; see TailMargin).
inline Schedule ChooseSchedule(int64_t tiles, int k_tiles, int slots, double margin = 0.95) {
  Schedule whole;
  whole.dp_tiles = static_cast<int>(tiles);
  whole.grid = static_cast<int>(tiles < slots ? tiles : slots);
  const int64_t rounds = (tiles + slots - 1) / slots;
  whole.cost = static_cast<double>(rounds) * (k_tiles + kUnitOverhead);
  const int64_t full = tiles / slots;
  const int64_t tail_tiles = tiles - full * slots;
  const int64_t tail_k = tail_tiles * k_tiles;
  int64_t tail_ctas = tail_k / kMinPiece;
  if (tail_ctas > slots) tail_ctas = slots;
  // Runs no shorter than a tile gain nothing over whole tiles.
  if (tail_k == 0 || tail_ctas <= tail_tiles) return whole;
  Schedule sk;
  sk.dp_tiles = static_cast<int>(full * slots);
  sk.tail_ctas = static_cast<int>(tail_ctas);
  sk.grid = full > 0 ? slots : sk.tail_ctas;
  const int64_t run = (tail_k + tail_ctas - 1) / tail_ctas;
  // A run of `run` k-tiles meets at most ceil(run / k_tiles) + 1 tiles: one piece each.
  const int64_t pieces = (run + k_tiles - 1) / k_tiles + 1;
  sk.cost = static_cast<double>(full) * (k_tiles + kUnitOverhead) + static_cast<double>(run) +
            static_cast<double>(pieces) * kUnitOverhead;
  return sk.cost < margin * whole.cost ? sk : whole;
}

// ---- A CTA's walk over its work units (a unit: one tile over k-tiles [kt_begin, + stages)),
// the same sequence for its copy warpgroup and its consumers: first its whole tiles, then the
// pieces of its tail run. Each unit is computed on its own (its own fold chunks from its first
// k-tile), so the results do not depend on which CTA runs it.
struct WorkUnit {
  int m_tile = 0, n_tile = 0;
  int kt_begin = 0;  // first k-tile
  int stages = 0;    // k-tiles: >= 1
};
// A unit short of its tile's k-tiles (only a tail piece can be): its sums go through the
// workspace (The tail's pieces, below). Derived, not carried: the kernels keep a unit's fields
// live across its k-tile loop, and registers are short there (BN = 64).
CONV2D_HOST_DEVICE_INLINE bool IsPartial(const Params& p, const WorkUnit& w) {
  return w.stages < p.k_tiles;
}
// A tail unit's tile, counted from the first tail tile (dp_tiles).
CONV2D_HOST_DEVICE_INLINE int TailTileOf(const Params& p, const WorkUnit& w) {
  return w.m_tile * p.n_tiles + w.n_tile - p.dp_tiles;
}
// Whole tiles only (no tail): the walk of the kernels compiled without the tail's state.
struct WholeTileWalk {
  int next_tile = 0;
  CONV2D_HOST_DEVICE_INLINE WholeTileWalk(const Params&, int cta) : next_tile(cta) {}
  CONV2D_HOST_DEVICE_INLINE bool Next(const Params& p, WorkUnit* w) {
    if (next_tile >= p.tiles) return false;
    w->m_tile = next_tile / p.n_tiles;
    w->n_tile = next_tile - w->m_tile * p.n_tiles;
    w->kt_begin = 0;
    w->stages = p.k_tiles;
    next_tile += p.grid;
    return true;
  }
};
struct UnitWalk {
  int next_tile = 0;     // the CTA's next whole tile, while < dp_tiles
  int r = 0, r_end = 0;  // the tail k-tiles [r, r_end) still to do (tail numbering)
  CONV2D_HOST_DEVICE_INLINE UnitWalk(const Params& p, int cta) : next_tile(cta) {
    if (cta < p.tail_ctas) {
      r = static_cast<int>(int64_t{cta} * p.tail_k / p.tail_ctas);
      r_end = static_cast<int>(int64_t{cta + 1} * p.tail_k / p.tail_ctas);
    }
  }
  CONV2D_HOST_DEVICE_INLINE bool Next(const Params& p, WorkUnit* w) {
    int tile;
    if (next_tile < p.dp_tiles) {
      tile = next_tile;
      next_tile += p.grid;
      w->kt_begin = 0;
      w->stages = p.k_tiles;
    } else if (r < r_end) {
      const int t = r / p.k_tiles;
      w->kt_begin = r - t * p.k_tiles;
      const int left = p.k_tiles - w->kt_begin;
      w->stages = r_end - r < left ? r_end - r : left;  // a whole tile here is stored as such
      r += w->stages;
      tile = p.dp_tiles + t;
    } else {
      return false;
    }
    w->m_tile = tile / p.n_tiles;
    w->n_tile = tile - w->m_tile * p.n_tiles;
    return true;
  }
};

// Bytes of the split filter (hi and lo planes, every (N tile, k-tile)), without alignment slack.
int64_t SplitFilterBytes(const Shape& s, int bn);

// ---- The split filter's tile: a BN x kBK plane, K-major, 128-byte swizzle.
// Element (n, k) lives in row n (128 bytes = kBK floats); rows are grouped by 8 into 1024-byte
// atoms; inside a row the 16-byte chunk k/4 is stored at chunk position (k/4) XOR (n%8). This is
// the layout wgmma's 128-byte swizzle mode expects of a 1024-byte aligned K-major operand.
CONV2D_HOST_DEVICE_INLINE int BTileOffset(int n, int k) {
  return (n >> 3) * 256 + (n & 7) * 32 + (((k >> 2) ^ (n & 7)) << 2) + (k & 3);
}
// The inverse: which (n, k) a float offset of the tile holds.
CONV2D_HOST_DEVICE_INLINE void BTileCoord(int off, int* n, int* k) {
  const int row = off >> 5;  // 32 floats per row
  const int chunk = (off >> 2) & 7;
  *n = row;
  *k = ((chunk ^ (row & 7)) << 2) + (off & 3);
}
// Float offset in the workspace of plane `plane` (0 hi, 1 lo) of k-tile kt of N tile nt.
CONV2D_HOST_DEVICE_INLINE int64_t WorkspaceTile(int bn, int k_tiles, int nt, int kt, int plane) {
  return ((int64_t{nt} * k_tiles + kt) * 2 + plane) * int64_t{bn} * kBK;
}
// The split kernel runs one block of kSplitThreads per (N tile, k-tile), blockIdx.x = nt*k_tiles
// + kt, then the tail counters' zeroing blocks (TailZeroBlocks) (no 64-bit division per element: an earlier one-thread-per-float form was ALU bound, 20 us
// for a 512x4608 filter). Element e of the block (e < bn*kBK, stepping by kSplitThreads) is
// w[*n][*k], read along k (a warp reads whole 128-byte filter rows), and its hi half goes to
// float *hi_at of the workspace, its lo half bn*kBK floats further (the lo plane). *n >= *n_end
// (past the tile's group or Cout) or *k >= K: zero.
constexpr int kSplitThreads = 256;
template <bool kGrouped>
CONV2D_HOST_DEVICE_INLINE void SplitFilterTarget(const Params& p, int bn, int block, int e, int* n,
                                                 int* n_end, int* k, int64_t* hi_at) {
  const int nt = block / p.k_tiles;
  const int kt = block - nt * p.k_tiles;
  const int nl = e / kBK, kl = e % kBK;
  const NTile tile = NTileOf<kGrouped>(p, bn, nt);
  *n = tile.n0 + nl;
  *n_end = tile.n_end;
  *k = kt * kBK + kl;
  *hi_at = WorkspaceTile(bn, p.k_tiles, nt, kt, 0) + BTileOffset(nl, kl);
}

// The dynamic shared memory's first 1024-byte aligned address (the kernel asks for 1024 bytes of
// slack), and where stage s begins.
CONV2D_HOST_DEVICE_INLINE uint32_t AlignSmemBase(uint32_t raw) { return (raw + 1023u) & ~1023u; }

// ---- wgmma shared-memory matrix descriptor (sm_90): bits 0-13 start address >> 4, 16-29 leading
// byte offset >> 4, 32-45 stride byte offset >> 4, 49-51 base offset, 62-63 swizzle mode
// (1 = 128-byte). For a K-major operand with the 128-byte swizzle the stride byte offset is the
// distance between 8-row atoms (1024 bytes); the leading byte offset is not used when the
// instruction's K extent (32 bytes here) lies within the swizzle row, and is set to 1 by
// convention. Base offset 0: every tile starts 1024-byte aligned.
constexpr uint64_t kDescSwizzle128 = uint64_t{1} << 62;
CONV2D_HOST_DEVICE_INLINE uint64_t MakeDescriptor(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | kDescSwizzle128;
}
// The descriptor of k8 step j (0..3) of a tile: 8 tf32 = 32 bytes further along the swizzle row.
// The hardware applies the swizzle to the computed address, so advancing the start address by
// the unswizzled byte offset is how one steps along K inside the 128-byte row.
CONV2D_HOST_DEVICE_INLINE uint64_t DescriptorAtStep(uint64_t desc, int j) { return desc + uint64_t(2 * j); }

// ---- A fragment (register operand) map, PTX ISA "wgmma .tf32 register fragment A" (m64 x k8):
// warp w of the warpgroup holds rows 16w..16w+15; lane = 4*gid + tig; reg 0 (gid, tig),
// 1 (gid+8, tig), 2 (gid, tig+4), 3 (gid+8, tig+4). wg: the warpgroup (its 64-row half of the
// tile); j: the k8 step in the stage. Returns the float index in the A stage.
CONV2D_HOST_DEVICE_INLINE int AFragIndex(int wg, int warp, int j, int lane, int reg) {
  const int gid = lane >> 2, tig = lane & 3;
  const int m = wg * kWarpgroupRows + warp * 16 + gid + ((reg & 1) ? 8 : 0);
  const int k = j * 8 + tig + ((reg & 2) ? 4 : 0);
  return k * kAStride + m;
}
// The accumulator map (m64 x nBN, f32): register r = 4*i + 2*h + c holds row 16w + gid + 8h,
// column 8i + 2*tig + c. Tile coordinates (m in 0..kBM-1, n in 0..BN-1).
CONV2D_HOST_DEVICE_INLINE void AccCoord(int wg, int warp, int lane, int reg, int* m, int* n) {
  const int gid = lane >> 2, tig = lane & 3;
  *m = wg * kWarpgroupRows + warp * 16 + gid + ((reg & 2) ? 8 : 0);
  *n = (reg >> 2) * 8 + 2 * tig + (reg & 1);
}

// ---- The tail's pieces. Tail tile t (tile dp_tiles + t) is cut by the CTAs' runs into one
// piece per CTA whose run meets it: CTAs PiecesOf(t).first_cta, +1, ..., in k order. A tile that
// one run holds whole is a whole unit (stored as such). Otherwise each piece's consumer threads
// store their BN/2 sums to slot PartialSlot(cta, t) of the workspace, [register][thread] (a warp's
// 32 values of one register fill one 128-byte line), and each consumer warp then counts itself on
// the tile's counter for that warp: each warp holds the same (pixel, channel) positions in every
// piece, so no warp waits for another, nor any CTA for another. The warp whose arrival is the
// tile's last adds the pieces' sums from the first CTA's on, in fp32 (__fadd_rn), then the
// bias, and stores y. The order is the tile's k order whichever CTA finishes first, so the bits
// of y are the same on every call. (cta, t) -> cta + t is one-to-one over the pieces: along the
// tail each next piece belongs to the next CTA, the next tile, or both.
constexpr int kConsumerWarps = kConsumerThreads / 32;
CONV2D_HOST_DEVICE_INLINE int TailTiles(const Params& p) { return p.tiles - p.dp_tiles; }
// The CTA whose run holds tail k-tile r (0 <= r < tail_k): the largest c with
// floor(c * tail_k / tail_ctas) <= r, UnitWalk's first k-tile of run c.
CONV2D_HOST_DEVICE_INLINE int TailCtaOf(const Params& p, int r) {
  return static_cast<int>((int64_t{r + 1} * p.tail_ctas - 1) / p.tail_k);
}
struct TailPieces {
  int first_cta = 0, count = 0;
};
CONV2D_HOST_DEVICE_INLINE TailPieces PiecesOf(const Params& p, int t) {
  const int first = TailCtaOf(p, t * p.k_tiles);
  return TailPieces{first, TailCtaOf(p, (t + 1) * p.k_tiles - 1) - first + 1};
}
CONV2D_HOST_DEVICE_INLINE int PartialSlot(int cta, int t) { return cta + t; }
// Slots: every (cta, t) of the tail (cta < tail_ctas, t < TailTiles) maps below this.
CONV2D_HOST_DEVICE_INLINE int64_t PartialSlots(const Params& p) {
  return p.tail_ctas > 0 ? int64_t{p.tail_ctas} + TailTiles(p) - 1 : 0;
}
// Consumer thread tid's register r of slot `slot`, as a float offset from the first slot.
CONV2D_HOST_DEVICE_INLINE int64_t PartialAt(int bn, int slot, int r, int tid) {
  return (int64_t{slot} * (bn / 2) + r) * kConsumerThreads + tid;
}
CONV2D_HOST_DEVICE_INLINE int TailCounters(const Params& p) {
  return p.tail_ctas > 0 ? TailTiles(p) * kConsumerWarps : 0;
}
// The counter of consumer warp `warp` (0..7: tid / 32) of tail tile t.
CONV2D_HOST_DEVICE_INLINE int TailCounter(int t, int warp) { return t * kConsumerWarps + warp; }
// The tail's workspace, after the split filter: the counters (int32), padded to kTailAlign
// bytes, then the slots. 0 without a tail.
constexpr int64_t kTailAlign = 256;
inline int64_t TailCounterBytes(const Params& p) {
  return (int64_t{TailCounters(p)} * 4 + kTailAlign - 1) / kTailAlign * kTailAlign;
}
inline int64_t TailWorkspaceBytes(const Params& p, int bn) {
  return TailCounterBytes(p) + PartialSlots(p) * (bn / 2) * kConsumerThreads * 4;
}
// The split kernel's blocks after its split's: they zero the counters, one per thread (the
// pieces' sums need no zeroing: every slot that is read was written in the same call).
CONV2D_HOST_DEVICE_INLINE int TailZeroBlocks(const Params& p) {
  return (TailCounters(p) + kSplitThreads - 1) / kSplitThreads;
}

// ---- The im2col gather of one copy thread (x offset of A[m][k] = mbase(m) + kofs(k)); t is the
// thread's index in the copy warpgroup (0..kCopyThreads-1).
// Scalar: thread t owns pixel columns t%16 + 16i, i < 8, and four k rows of the stage,
// 8w + 2h + {0, 1, 4, 5} (w = t/32 its warp, h = (t/16)%2 its half-warp). Per k-tile it decodes
// its rows' (c, p, q) once (two divisions each), and each copy is then one add of offsets it keeps
// from Init. A warp's copy covers 16 consecutive pixels of two rows 2*kAStride = 16 (mod 32)
// words apart: 32 distinct banks.
// Vector: thread t owns pixels 4*(t % 32) .. +3 and k rows t/32 + 4i, i < 8.
// kUnmasked: interior stages take a path without masks (Config::kUnmaskedGather).
// kGeometry (padding, stride, dilation; scalar only, always masked): Init keeps each column's
// window origin as its x offset and a TapMask (zero past M), and a copy is read iff its k row is
// below K and its tap's two bits are in the column's mask; a copy costs a mask test more than
// the basic masked path, no division.
template <bool kVec, bool kUnmasked = false, bool kGeometry = false>
struct AGather {
  static_assert(!(kGeometry && kVec), "the geometry gather is scalar");
  static constexpr int kRows = kVec ? kBK * kBM / 4 / kCopyThreads : 4;  // k rows per thread
  static constexpr int kCols = kVec ? 1 : kBK * kBM / kCopyThreads / 4;  // pixel columns: 8
  static constexpr int kColStep = 16;
  static_assert(kVec || kCols * kColStep == kBM, "the scalar columns cover the tile");
  static_assert(kVec || kRows * 8 == kBK, "the scalar rows: four per thread, 8 per warp");
  int col = 0;   // first pixel column
  int row0 = 0;  // first k row
  uint32_t m_valid = 0;  // bit i: column col + i*kColStep is a pixel (< M)
  int mbase[kCols] = {};
  uint32_t taps[kGeometry ? kCols : 1] = {};  // kGeometry: column i's TapMask, 0 past M

  // The stage row of this thread's j-th k row.
  CONV2D_HOST_DEVICE_INLINE int Row(int j) const {
    return kVec ? row0 + j * (kCopyThreads / 32) : row0 + (j & 1) + 4 * (j >> 1);
  }

  CONV2D_HOST_DEVICE_INLINE void Init(const Params& p, int m0, int t) {
    m_valid = 0;  // Init runs once per work unit
    if (kVec) {
      col = 4 * (t % 32);
      row0 = t / 32;
    } else {
      col = t % kColStep;
      row0 = 8 * (t / 32) + 2 * ((t / 16) % 2);
    }
CONV2D_UNROLL
    for (int i = 0; i < kCols; ++i) {
      // Vector form: M % 4 = 0 and m % 4 = 0, so m < M covers all four pixels.
      const int m = m0 + col + i * kColStep;
      mbase[i] = 0;
      if (kGeometry) taps[i] = 0;
      if (m < p.m) {
        m_valid |= 1u << i;
        if (kGeometry) {
          const implicit_gemm_view::Origin o = implicit_gemm_view::OriginOf(p, m);
          mbase[i] = o.base;
          taps[i] = implicit_gemm_view::TapMask(p, o.row, o.col);
        } else {
          mbase[i] = PixelBase(p, m);
        }
      }
    }
  }

  // f(float index in the A stage, x offset, valid) for this thread's copies of k-tile kt; invalid
  // copies (pixel past M or k past K) zero-fill and carry offset 0.
  template <class F>
  CONV2D_HOST_DEVICE_INLINE void ForEach(const Params& p, int kt, F&& f) const {
    if (kGeometry) {
CONV2D_UNROLL
      for (int j = 0; j < kRows; ++j) {
        const int row = Row(j);
        const int kg = kt * kBK + row;
        const int c = p.div_khkw.Div(kg);
        const int r = kg - c * (p.kh * p.kw);
        const int kp = p.div_kw.Div(r);
        const int kq = r - kp * p.kw;
        const int kofs = c * p.hw + kp * p.dh_w + kq * p.dw;
        const uint32_t bits = implicit_gemm_view::TapBits(kp, kq);
        const bool k_valid = kg < p.k;
CONV2D_UNROLL
        for (int i = 0; i < kCols; ++i) {
          const bool valid = k_valid && (taps[i] & bits) == bits;
          f(row * kAStride + col + i * kColStep, valid ? mbase[i] + kofs : 0, valid);
        }
      }
    } else if (kVec) {
CONV2D_UNROLL
      for (int i = 0; i < kRows; ++i) {
        const int row = Row(i);
        const int kg = kt * kBK + row;
        const int c = p.div_khkw.Div(kg);
        const int r = kg - c * (p.kh * p.kw);  // kw = 1: r is the kernel row
        const bool valid = (m_valid & 1u) && kg < p.k;
        f(row * kAStride + col, valid ? mbase[0] + c * p.hw + r * p.w : 0, valid);
      }
    } else if (kUnmasked && m_valid == (1u << kCols) - 1 && (kt + 1) * kBK <= p.k) {
      // An interior stage (every stage of a tile but the last m-tile's and the last k-tile):
      // no masks, so each copy costs an add and the address, not a mask test and a select too.
CONV2D_UNROLL
      for (int j = 0; j < kRows; ++j) {
        int kofs = KOffset(p, kt * kBK + Row(j));
#if defined(__CUDA_ARCH__)
        asm("" : "+r"(kofs));  // one add per copy: keeps the compiler from re-associating
#endif
CONV2D_UNROLL
        for (int i = 0; i < kCols; ++i) {
          f(Row(j) * kAStride + col + i * kColStep, mbase[i] + kofs, true);
        }
      }
    } else {
CONV2D_UNROLL
      for (int j = 0; j < kRows; ++j) {
        const int row = Row(j);
        const int kg = kt * kBK + row;
        const int kofs = KOffset(p, kg);
        const bool k_valid = kg < p.k;
CONV2D_UNROLL
        for (int i = 0; i < kCols; ++i) {
          const bool valid = k_valid && ((m_valid >> i) & 1u);
          f(row * kAStride + col + i * kColStep, valid ? mbase[i] + kofs : 0, valid);
        }
      }
    }
  }

  // The x offset of reduction term kg (c, kp, kq) from a pixel's base.
  CONV2D_HOST_DEVICE_INLINE static int KOffset(const Params& p, int kg) {
    const int c = p.div_khkw.Div(kg);
    const int r = kg - c * (p.kh * p.kw);
    const int kp = p.div_kw.Div(r);
    const int kq = r - kp * p.kw;
    return c * p.hw + kp * p.w + kq;
  }
};

}  // namespace implicit_gemm_wgmma_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_IMPLICIT_GEMM_WGMMA_INTERNAL_H_
