// The Hopper (sm_90a, wgmma) kernel of the 3xTF32 channel mix: its index algebra in plain C++,
// shared by the kernel (cgemm_3xtf32_sm90.cu) and a CPU test that replays it against fp64.
//
// The product is cgemm_3xtf32.h's, C_f = A_f * B_f^H, computed transposed as in the mma.sync
// kernel: C_f^T (n x m) = conj(B_f) (n x k) * A_f^T (k x m). The wgmma M dimension (64 rows per
// warpgroup) runs over n (output channels), its K (8 per instruction) over four complex k values
// l = l0 + t (t < 4): K slot t holds a real part, slot t + 4 an imaginary part. Its N dimension
// holds each of the kN columns of m twice, so that one instruction gives both outputs from one A
// operand, (Br, Bi) in slots (t, t + 4):
//   columns [0, kN):     B operand slots (Ar, Ai):  sum Br*Ar + Bi*Ai  = Re C
//   columns [kN, 2 kN):  B operand slots (Ai, -Ar): sum Br*Ai - Bi*Ar  = Im C
// Both operands reach shared memory raw, by cp.async. The A operand (the filter spectrum) goes on
// to registers in the wgmma fragment layout and is split there (each element once per CTA, by the
// one thread that holds it). The B operand (the input spectrum) is split into two TF32 planes
// (hi, lo) in the no-swizzle K-major layout that wgmma reads through a matrix descriptor: 8 x
// 16-byte core matrices of 8 columns by 4 K slots, the K neighbour 128 bytes on (the descriptor's
// leading byte offset), the column-group neighbour 256 bytes on (its stride byte offset).
//
// Each product a*b is lo_a*hi_b + hi_a*lo_b + hi_a*hi_b. The tensor cores sum each stage of kBk
// complex k (the first instruction with scale-d = 0) into partials that fp32 adds fold into the
// running sums: see cgemm_3xtf32.cu's ComputeStage for why (accuracy).
//
// The CTA is warp-specialised (round 30 of docs/PERF.md: the single-role kernel before it kept
// the tensor cores idle 2/3 of the time): a copy warpgroup issues the raw stages' cp.async as far
// ahead as the ring of kSlots slots (a raw stage and its planes) allows; a split warpgroup turns
// each landed input tile into the planes; the kWgs consumer warpgroups (64 n rows each) load and
// split their A fragments, run the wgmma and fold. They hand slots on through mbarriers: "loaded"
// (the copies landed: cp.async.mbarrier.arrive), "full" (the planes written), "empty" (the wgmma
// done), so no CTA-wide barrier stalls anyone, and while one consumer warpgroup folds, the
// other's wgmma run. (One producer warpgroup doing copies and split in turn set the pace: its
// chain per stage, from the copies through its barrier and the split to the arrive, was longer
// than the stage's wgmma.)
// CTAs are persistent: each walks work items (f, m tile, n tile) = blockIdx.x, + gridDim.x, ...,
// and the slot ring runs on across items.
#ifndef CONV2D_CONV_CGEMM_3XTF32_SM90_INTERNAL_H_
#define CONV2D_CONV_CGEMM_3XTF32_SM90_INTERNAL_H_

#include <cstdint>

#include "conv/algorithms/fft/cgemm_3xtf32_internal.h"  // the mma.sync kernel's tiles
#include "conv/algorithms/fft/fft_tiled_internal.h"  // GemmLayout, CONV2D_HOST_DEVICE

namespace conv2d {
namespace cgemm_3xtf32_sm90 {

constexpr int kBk = 16;            // complex k per stage (four wgmma K steps)
constexpr int kSteps = kBk / 4;    // wgmma K steps per stage
constexpr int kRowsPerWg = 64;     // n rows per warpgroup (wgmma M)
constexpr int kCoreBytes = 128;    // one core matrix: 8 columns x 16 bytes
constexpr int kLeadingBytes = 128;  // descriptor LBO: the K-neighbour core matrix
constexpr int kStrideBytes = 256;   // descriptor SBO: the next 8 columns

constexpr int kStagePad = 4;        // staged rows padded to 4 (mod 16) complex: see StagedOffset
constexpr int kCopyThreads = 128;   // the copy warpgroup
constexpr int kSplitThreads = 128;  // the split warpgroup
constexpr int kProducerThreads = kCopyThreads + kSplitThreads;
constexpr int kSlots = 4;  // slots (raw stage + planes) in the ring between the roles

// A CTA: the producer warpgroups, then kWgs consumer warpgroups (n rows 64*kWgs) by kN columns of m.
struct Tile {
  int wgs = 0;     // consumer warpgroups: 1 or 2
  int n_cols = 0;  // kN: 32 or 56
  int threads = 0;       // kProducerThreads + 128 * wgs
  int rows = 0;          // n rows: 64 * wgs
  int ld_filter = 0;     // staged filter rows (one per k), complex
  int ld_input = 0;      // staged input-spectrum rows (one per k), complex
  int staged_bytes = 0;  // one raw stage: filter [kBk][ld_filter] then input [kBk][ld_input]
  int plane_bytes = 0;   // one TF32 plane of one stage: kSteps K steps of 2 kN columns
  int buffer_bytes = 0;  // hi and lo planes
  int slot_bytes = 0;    // a raw stage, then its hi and lo planes
  int barrier_offset = 0;  // kSlots "loaded", "full" and "empty" mbarriers (8 bytes each)
  int smem_bytes = 0;
};
CONV2D_HOST_DEVICE constexpr Tile MakeTile(int wgs, int n_cols) {
  Tile t;
  t.wgs = wgs;
  t.n_cols = n_cols;
  t.threads = kProducerThreads + 128 * wgs;
  t.rows = kRowsPerWg * wgs;
  t.ld_filter = t.rows + kStagePad;
  t.ld_input = n_cols + ((kStagePad - n_cols) % 16 + 16) % 16;
  t.staged_bytes = kBk * (t.ld_filter + t.ld_input) * 8;
  t.plane_bytes = kSteps * (2 * n_cols / 8) * 2 * kCoreBytes;
  t.buffer_bytes = 2 * t.plane_bytes;
  t.slot_bytes = t.staged_bytes + t.buffer_bytes;
  t.barrier_offset = kSlots * t.slot_bytes;
  t.smem_bytes = t.barrier_offset + 3 * kSlots * 8;
  return t;
}

// Raw stages are filled by the copy warpgroup's cp.async (8 bytes: the spectra's leading dimensions can
// be odd). Each copy thread owns fixed rows and columns and walks k: filter copies take row j
// = tid % rows (two rows, 2 (tid % (rows / 2)) + {0, 1}, when 16 bytes wide; see
// WideFilterCopies) of k rows tid / rows + r * (threads / rows); input copies (threads below
// kN * (threads / kN)) take column tid % kN of k rows tid / kN + r * (threads / kN). Per stage a
// thread computes one address per operand and adds a stride per copy; consecutive threads copy
// consecutive addresses.
CONV2D_HOST_DEVICE constexpr int FilterCopies(int rows, int threads) {
  return kBk * rows / threads;
}
CONV2D_HOST_DEVICE constexpr int InputRowsPerPass(int n_cols, int threads) {
  return threads / n_cols;
}
CONV2D_HOST_DEVICE constexpr int InputCopies(int n_cols, int threads) {
  return kBk / InputRowsPerPass(n_cols, threads);
}
// Complex offset of staged element (row or column x, k kk) in a part with leading dimension ld.
// ld = 4 (mod 16) complex keeps both readers conflict-free: fragment loads (8 lanes x, 4 lanes
// kk) and the split (4 lanes kk, 8 lanes x) each put a half-warp's 16 8-byte words on 16
// distinct bank pairs.
CONV2D_HOST_DEVICE inline int StagedOffset(int ld, int x, int kk) { return kk * ld + x; }

// One warpgroup for n <= 64, else two; 32 columns for m <= 32, else 56 (64 spilled registers).
inline Tile ChooseTile(const fft_tiled::GemmLayout& l) {
  return MakeTile(l.n > kRowsPerWg ? 2 : 1, l.m <= 32 ? 32 : 56);
}

// CgemmKernel::kAuto's choice on sm_90 (tools/mix_kernels measured both kernels on the mixes of
// both benchmark suites, PERF.md round 32). Both run at 48-55 TFLOP/s of complex products over
// their padded CTA tiles, except the one-warpgroup wgmma kernel's 32-column tile (44), so:
// - more than 64 output channels: wgmma (two warpgroups; 0.19 against 0.34 ms on KernelBot's
//   128-channel mixes);
// - 33 to 64: wgmma (one warpgroup) when its 56-column tiles pad m less than mma.sync's tiles
//   (m = 100: 112 columns against 128, 0.040 against 0.047 ms; m = 256: 280 against 256, 0.048
//   against 0.046 ms); never for m <= 32 (0.049 against 0.045 ms);
// - 32 or fewer: mma.sync (half the warpgroup's 64 rows would idle).
inline bool AutoTakesWgmma(const fft_tiled::GemmLayout& l) {
  if (l.n > kRowsPerWg) return true;
  if (l.n <= kRowsPerWg / 2 || l.m <= 32) return false;
  auto padded = [&](int cols) { return (l.m + cols - 1) / cols * cols; };
  return padded(ChooseTile(l).n_cols) < padded(cgemm_3xtf32::ChooseTile(l).bm);
}

struct Grid {
  int tiles_m = 0, tiles_n = 0;
  int64_t items = 0;  // batch * tiles_n * tiles_m
};
inline Grid MakeGrid(const fft_tiled::GemmLayout& l, const Tile& t) {
  Grid g;
  g.tiles_m = (l.m + t.n_cols - 1) / t.n_cols;
  g.tiles_n = (l.n + kRowsPerWg * t.wgs - 1) / (kRowsPerWg * t.wgs);
  g.items = static_cast<int64_t>(g.tiles_m) * g.tiles_n * l.batch;
  return g;
}

// Work item -> (m tile, n tile, f); m tiles vary fastest (they share B_f in L2).
struct Item {
  int tm, tn, f;
};
CONV2D_HOST_DEVICE inline Item ItemOf(int item, int tiles_m, int tiles_n) {
  const int rest = item / tiles_m;
  return {item % tiles_m, rest % tiles_n, rest / tiles_n};
}

// Byte offset, within one plane of one stage, of B-operand element (column c < 2 kN, K step s,
// K slot q < 8): the no-swizzle K-major layout the descriptor below describes.
CONV2D_HOST_DEVICE inline int PlaneOffset(int n_cols, int c, int s, int q) {
  return s * (2 * n_cols / 8) * kStrideBytes + (c >> 3) * kStrideBytes +
         (q >> 2) * kLeadingBytes + (c & 7) * 16 + (q & 3) * 4;
}

// The split's work: group r of split thread tid is column c of K step s, the four complex
// k = 4s .. 4s + 3 of that column, whose real parts fill one 16-byte row of a core matrix (K
// slots 0-3) and imaginary parts the next core matrix's (slots 4-7): each of the four (form,
// slots) rows of each plane is one 16-byte store. Eight consecutive threads take eight
// consecutive columns (kN and 128 are multiples of 8), one 128-byte core matrix: no bank
// conflict. `valid` is false past the stage.
struct SplitGroup {
  int c, s;
  bool valid;
};
CONV2D_HOST_DEVICE inline SplitGroup SplitGroupOf(int n_cols, int threads, int tid, int r) {
  const int g = tid + r * threads;
  return {g % n_cols, g / n_cols, g < kSteps * n_cols};
}
CONV2D_HOST_DEVICE constexpr int SplitGroupsPerThread(int n_cols, int threads) {
  return (kSteps * n_cols + threads - 1) / threads;
}

// With the filter spectrum 16-byte aligned (even ldb and stride_b), its copies are 16 bytes, two
// rows j, j + 1 each: copy r of copy thread tid takes rows 2 (e % (rows / 2)) + {0, 1} of k
// e / (rows / 2), e = tid + r * threads.
CONV2D_HOST_DEVICE constexpr int WideFilterCopies(int rows, int threads) {
  return kBk * rows / 2 / threads;
}

// The wgmma fragment maps (PTX ISA, wgmma .m64nNk8 with .tf32; lane = 4*g + t, warp w < 4 of the
// warpgroup):
//   A (64 x 8, registers): a0 (16w+g, t), a1 (16w+g+8, t), a2 (16w+g, t+4), a3 (16w+g+8, t+4)
//   D (64 x 2kN): d[4j+v] at row 16w + g + 8*(v >> 1), column 8j + 2t + (v & 1), j < 2kN/8
CONV2D_HOST_DEVICE inline int FragRow(int warp, int lane, int half) {
  return 16 * warp + (lane >> 2) + 8 * half;
}
CONV2D_HOST_DEVICE inline int AccRow(int warp, int lane, int v) {
  return 16 * warp + (lane >> 2) + 8 * ((v & 3) >> 1);
}
CONV2D_HOST_DEVICE inline int AccCol(int lane, int v) {
  return 8 * (v >> 2) + 2 * (lane & 3) + (v & 1);
}

// The shared-memory matrix descriptor (PTX ISA "matrix descriptor format"): start address, LBO
// and SBO in 16-byte units in bits 0-13, 16-29, 32-45; base offset 0; swizzle mode 0 (none).
CONV2D_HOST_DEVICE inline uint64_t Descriptor(uint32_t smem_address) {
  return static_cast<uint64_t>((smem_address >> 4) & 0x3fff) |
         (static_cast<uint64_t>(kLeadingBytes >> 4) << 16) |
         (static_cast<uint64_t>(kStrideBytes >> 4) << 32);
}

}  // namespace cgemm_3xtf32_sm90
}  // namespace conv2d

#endif  // CONV2D_CONV_CGEMM_3XTF32_SM90_INTERNAL_H_
