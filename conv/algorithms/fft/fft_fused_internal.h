// fft_fused internals: the planning (tile choice, shared-memory and workspace layouts, cost
// model) and the bodies of the three fused kernels, written once as host+device templates over
// an execution context so that the CPU tests run the very code the GPU runs.
//
// The algorithm is fft_tiled's (overlap-save, see fft_tiled_internal.h): the same tile geometry,
// the same frequency-major spectra (element f = k0*(Tw/2+1) + k1 of transform n at f*N + n;
// filter n = c*Cout + o, input n = c*M + m, output n = o*M + m) and the same per-frequency
// channel mix (fft_tiled::ChannelMixLayout). What changes is that the transforms are our own
// shared-memory FFTs, fused with what surrounds them:
//   filter kernel  : read w, zero-pad implicitly, 2D FFT, write the filter spectrum
//   input kernel   : read the tile windows from x (zero past the image and in the padding: the
//                    tiles cover the padded image, no padded copy of x), 2D FFT, write spectrum
//   inverse kernel : read the output spectrum, inverse 2D FFT, scale, write the valid part to y
// Tiles are powers of two from 8 to 128 in each dimension.
//
// One CTA transforms G = 2P consecutive transforms n0 .. n0+G-1 as P complex 2D FFTs of size
// Th x Tw: pair p carries transform n0+2p in the real part and n0+2p+1 in the imaginary part
// (two real FFTs for the price of one complex FFT). Forward, the two spectra are separated on
// the way out: A[k] = (Z[k] + conj Z[-k]) / 2, B[k] = (Z[k] - conj Z[-k]) / 2i, both exactly
// Hermitian. Inverse, the two Hermitian half spectra are combined into Z = A + iB over the full
// Th x Tw (the k1 = 0 and k1 = Tw/2 columns projected onto Hermitian symmetry), transformed back,
// and the real and imaginary parts are the two outputs. The inverse is computed as
// conj(DFT(conj Z)), so only the forward transform exists.
//
// The 1D FFTs are radix-2 decimation in frequency (Gentleman-Sande), in place, natural order in,
// bit-reversed order out; R consecutive radix-2 stages run in registers on groups of 2^R
// elements (one pass = one round trip through shared memory). Within a pass the twiddles are
// compile-time constants; between passes each element is multiplied once by an entry of a
// 128-entry table of exp(-2 pi i k / 128), computed in double and rounded once to float (see
// DifGroup). A 2D FFT runs the rows (along the width) and then the
// columns. Pruning: the filter's row pass skips the all-zero rows past the kernel, and the first
// stage of its row and column passes skips a zero second half (kernel <= tile/2); the inverse's
// column pass computes only the columns that hold valid outputs.
//
// Every phase of a kernel is a ForEach over independent items (one item = one thread's work,
// item i on thread i % kThreads) followed by a barrier; no two items of a phase touch the same
// shared element unless both only read it. The CPU test runs the phases item by item and checks
// exactly that, plus bounds, reads of unwritten elements and a bank-conflict model.
//
// Shared-memory layout of one CTA: meta[G] (per-transform base offsets and extents), stats[G]
// (TransformStats, see CleanTransforms), tw[128] (twiddles), data[P * pair_stride] (complex). Element (u, v) of pair p is at
//   p * pair_stride + u * row_pitch + v + (v >> 4)
// row_pitch odd (the row passes give each lane its own row) and one pad element every 16
// columns, so that bit-reversed column indices spread over the banks; pair_stride's residue is
// chosen per kernel (see SmemLayout).
#ifndef CONV2D_CONV_FFT_FUSED_INTERNAL_H_
#define CONV2D_CONV_FFT_FUSED_INTERNAL_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conv/core/algorithm.h"
#include "conv/algorithms/fft/cgemm_3xtf32_internal.h"  // CgemmKernel
#include "conv/algorithms/fft/fft_tiled_internal.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/float_bits.h"
#include "conv/arch/host_device.h"
#include "conv/shape.h"

namespace conv2d {
namespace fft_fused {

using fft_tiled::Dims;
using fft_tiled::Geometry;

// Choices the registered variants leave at their defaults ("fft_fused": all defaults;
// "fft_fused_3xtf32": gemm_3xtf32); tests and tuning set them.
struct Options {
  // Tile height and width: 0 lets the cost model choose; else a power of two in [8, 128] that
  // is >= the kernel size in its dimension.
  int64_t tile_h = 0;
  int64_t tile_w = 0;
  // Complex 2D FFTs (two transforms each) per CTA: 0 for the default (as many as fit in
  // kSmemTargetBytes, at most 16); else a power of two in [1, 16].
  int pairs_per_cta = 0;
  // Channel mix on the tensor cores in split precision (CgemmConjBatched3xTf32, fp32-level
  // error) instead of cuBLAS's fp32 SIMT CGEMM; then no cuBLAS handle and no cuBLAS workspace.
  bool gemm_3xtf32 = false;
  // With gemm_3xtf32: cgemm_3xtf32's kernel (kAuto: its own choice; the others to measure it).
  CgemmKernel mix_kernel = CgemmKernel::kAuto;
};


constexpr int kThreads = 256;               // per CTA, every kernel
constexpr int kLog2Threads = 8;
constexpr int kMinLog2Tile = 3;             // tiles 8 ..
constexpr int kMaxLog2Tile = 7;             // .. 128
constexpr int kTwiddles = 128;              // exp(-2 pi i k / 128), k < 128
constexpr int kMaxPairs = 16;               // G <= 32: a 256-byte run per frequency
constexpr int kDefaultMaxPairs = 4;         // the default's cap (fft_fused_plan.cc says why)
constexpr size_t kSmemTargetBytes = 72 * 1024;   // three CTAs per SM on an H100/H200
constexpr size_t kMaxSmemBytes = 227 * 1024;     // sm_90's opt-in limit per CTA

// Per transform, in shared memory: the offset in x, w or y of its element (0, 0), and which of
// its rows and columns are inside the tensor: rows [row0, rows) and columns [col0, cols) (empty
// for a transform past the end). Only an x tile has row0 or col0 > 0: one that starts in the
// top or left padding, whose element (0, 0) then lies before its row of x (base may even be
// negative; only the elements inside are ever read). All four are at most the tile size.
struct TransformMeta {
  int base;
  int16_t row0, rows;
  int16_t col0, cols;
  int pitch;  // row pitch in the tensor (elements)
};
static_assert(sizeof(TransformMeta) == 16, "SmemBytes and the CPU test count 16 bytes");
// Whether tile element (u, v) is inside the tensor.
CONV2D_HOST_DEVICE inline bool Inside(const TransformMeta& t, int u, int v) {
  return u >= t.row0 && u < t.rows && v >= t.col0 && v < t.cols;
}
// A meta of rows [row0, rows) and columns [col0, cols) (each clamped to [0, limit], rows >= row0).
CONV2D_HOST_DEVICE inline TransformMeta MakeMeta(int base, int pitch, int row0, int rows,
                                                 int col0, int cols, int limit_h, int limit_w) {
  auto clamp = [](int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; };
  const int r0 = clamp(row0, 0, limit_h), c0 = clamp(col0, 0, limit_w);
  TransformMeta t;
  t.base = base;
  t.pitch = pitch;
  t.row0 = static_cast<int16_t>(r0);
  t.rows = static_cast<int16_t>(clamp(rows, r0, limit_h));
  t.col0 = static_cast<int16_t>(c0);
  t.cols = static_cast<int16_t>(clamp(cols, c0, limit_w));
  return t;
}

struct SmemLayout {
  int pairs = 0;            // P
  int row_pitch = 0;        // in complex elements, odd
  int pair_stride_fwd = 0;  // filter and input kernels
  int pair_stride_inv = 0;  // inverse kernel
  size_t bytes_fwd = 0;     // dynamic shared memory per CTA
  size_t bytes_inv = 0;
};
// P = options' or the default; the strides' residues mod 16 spread what one half-warp touches
// over the banks in the spectrum store (forward) and load (inverse) phases.
SmemLayout MakeSmemLayout(const Geometry& g, int pairs_per_cta);

// The row pitch for tiles 2^log2_tw wide: odd, with one pad element every 16 columns.
CONV2D_HOST_DEVICE constexpr int RowPitch(int log2_tw) {
  return ((1 << log2_tw) + (1 << log2_tw) / 16) | 1;
}

// The residue mod 16 (in complex elements; 16 of them per 128-byte row of banks) of the
// distance between pairs. In the spectrum store (forward) and load (inverse) phases a
// half-warp touches P pairs x 16/P consecutive k1 (and their mirrors -k1), at bit-reversed
// columns forward, natural ones inverse; the residue is the one whose modelled wavefronts over
// all those half-warps are fewest (the smallest such). constexpr: the pinned kernels (Pin) take
// it as a compile-time constant.
CONV2D_HOST_DEVICE constexpr int PairStrideResidue(int log2_tw, int pairs, bool inverse) {
  if (pairs <= 1) return 0;
  const int tw = 1 << log2_tw;
  const int np = pairs < 16 ? pairs : 16, run = pairs < 16 ? 16 / pairs : 1;
  int best = 0, best_cost = -1;
  for (int delta = 0; delta < 16; ++delta) {
    int cost = 0;
    for (int start = 0; start < tw / 2; start += run) {
      for (int mirror = 0; mirror < 2; ++mirror) {
        int count[16] = {};
        for (int p = 0; p < np; ++p) {
          for (int k1 = start; k1 < start + run && k1 < tw / 2; ++k1) {
            const int c = mirror ? (tw - k1) & (tw - 1) : k1;
            int v = c;
            if (!inverse) {  // bit-reversed column
              v = 0;
              for (int i = 0; i < log2_tw; ++i) v |= ((c >> i) & 1) << (log2_tw - 1 - i);
            }
            ++count[(p * delta + v + (v >> 4)) % 16];
          }
        }
        int worst = 0;
        for (int i = 0; i < 16; ++i) worst = count[i] > worst ? count[i] : worst;
        cost += worst;
      }
    }
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = delta;
    }
  }
  return best;
}

// The distance between pairs (complex elements): the least >= 2^log2_th rows of RowPitch with
// PairStrideResidue's residue mod 16.
CONV2D_HOST_DEVICE constexpr int PairStride(int log2_th, int log2_tw, int pairs, bool inverse) {
  const int base = (1 << log2_th) * RowPitch(log2_tw);
  return base + ((PairStrideResidue(log2_tw, pairs, inverse) - base) % 16 + 16) % 16;
}

enum Buffer {
  kFilterSpectrum,  // [F][Cin*Cout] complex, written by the filter kernel
  kInputSpectrum,   // [F][Cin*M]
  kOutputSpectrum,  // [F][Cout*M], written by the channel mix
  kBlasWork,        // cuBLAS's workspace (none with gemm_3xtf32)
  kSparse,          // SparseLists: what the transforms left out, added back exactly
  kNumBuffers,
};
const char* BufferName(Buffer buffer);

struct WorkspaceLayout {
  size_t offset[kNumBuffers] = {};  // from the workspace base rounded up to kAlignment
  size_t bytes[kNumBuffers] = {};
  size_t used_bytes = 0;
  size_t total_bytes = 0;  // used_bytes + kAlignment: what Run needs from an unaligned pointer
};
// All live together (the mix reads two and writes the third), so one after the other.
WorkspaceLayout MakeWorkspaceLayout(const Shape& shape, const Geometry& g, const Options& options);

// The cost model (see fft_fused_plan.cc). Uncalibrated: constants are first guesses.
struct Cost {
  double filter_seconds = 0, input_seconds = 0, gemm_seconds = 0, inverse_seconds = 0;
  double fft_flops = 0;
  double gemm_flops = 0;
  double bytes = 0;  // DRAM traffic of all passes
  int kernels = 0;
  double seconds = 0;
};
Cost EstimateCost(const Shape& shape, const Geometry& g, const SmemLayout& smem,
                  const Options& options);

struct Config {
  Geometry geometry;
  SmemLayout smem;
  WorkspaceLayout workspace;
  Cost cost;
};

// Powers of two from max(8, kernel) to the first >= extent, capped at 128. Empty if kernel > 128.
std::vector<int64_t> TileSizeCandidates(int64_t kernel, int64_t extent);

// The tile (forced by options, or the cheapest by the model among those whose workspace is <=
// fft_tiled::kTargetWorkspaceBytes, else the one with the smallest workspace). Unimplemented for
// kernels larger than 128; InvalidArgument for bad options; OutOfRange past 2 GiB of workspace
// or int32 indexing. Never touches the GPU.
absl::StatusOr<Config> ChooseConfig(const Shape& shape, const Options& options);

// Everything the kernels need, by value.
struct KernelParams {
  Dims d;
  int log2_th = 0, log2_tw = 0;
  int pairs = 0;              // a power of two
  int log2_pairs = 0;
  int row_pitch = 0;
  int pair_stride = 0;       // of the kernel it is passed to
  int filter_row_log2 = 0;   // the filter's row pass covers rows [0, 2^this) >= kernel_h
  int n_filter = 0;          // Cin * Cout
  int n_input = 0;           // Cin * M
  int n_output = 0;          // Cout * M
  float scale = 0;           // 1 / (Th * Tw), exact: applied to the filter spectrum
  // The inverse's output phase: by step_w, and by its chunks of four rows, ceil(step_h / 4)
  // (conv/arch/fast_div.h; every item index is below 2^31).
  FastDiv div_step_w, div_out_chunks;
  // Zero padding (Shape's): output (r, c) reads x at (r + p - pad_top, c + q - pad_left), zero
  // outside the image. The tiles are laid over the padded image (tile origins in d are in its
  // coordinates, which are the output's); pad_bottom and pad_right are implied by out_h, out_w.
  int pad_top = 0, pad_left = 0;
  int padded = 0;  // any padding (then SparseLists::x_mean exists)
};
KernelParams MakeKernelParams(const Shape& shape, const Config& config, bool inverse);

// Pinned tiles. The kernels' bodies take the tile size, the pair count and the shared-memory
// strides from KernelParams at run time, so every shift, mask, trip count and address offset
// derived from them is computed per item. For the configurations the benchmark runs, the GPU
// launches copies of the kernels whose KernelParams has those fields replaced by compile-time
// constants of the same values (Pin): the same code and the same results, but the index
// arithmetic folds into immediates and the ForEach rounds unroll. A configuration is pinned only
// if Pin changes none of its values (PinnedIndex checks), so the generic path and the CPU tests
// cover the pinned kernels too.
struct PinnedTile {
  int log2_th, log2_tw, pairs;
};
// 64x64 x2: KernelBot (256, K, 128, B); 32x32 x4: (128, 8, 64, 4); 32x128 x2 and 32x64 x4:
// (128, 16, 64, 4) (fft_fused and fft_fused_3xtf32 pick different tiles there); 16x64 x4: the
// cnn suite's (16,64,64,64,5) and (8,64,64,64,7), where auto takes fft_fused_3xtf32.
constexpr PinnedTile kPinnedTiles[] = {{6, 6, 2}, {5, 5, 4}, {5, 7, 2}, {5, 6, 4}, {4, 6, 4}};
constexpr int kNumPinned = sizeof(kPinnedTiles) / sizeof(kPinnedTiles[0]);

template <int kPin, bool kInverse>
CONV2D_HOST_DEVICE inline KernelParams Pin(KernelParams k) {
  constexpr PinnedTile t = kPinnedTiles[kPin];
  constexpr int log2_pairs = t.pairs == 1 ? 0 : t.pairs == 2 ? 1 : t.pairs == 4 ? 2 : 3;
  static_assert((1 << log2_pairs) == t.pairs, "pinned pair counts are 1, 2, 4 or 8");
  k.log2_th = t.log2_th;
  k.log2_tw = t.log2_tw;
  k.pairs = t.pairs;
  k.log2_pairs = log2_pairs;
  k.row_pitch = RowPitch(t.log2_tw);
  k.pair_stride = PairStride(t.log2_th, t.log2_tw, t.pairs, kInverse);
  return k;
}

// The index into kPinnedTiles of the pinned kernel that computes exactly what the generic one
// does with `k` (of the forward kernels, or of the inverse), or -1.
inline int PinnedIndex(const KernelParams& k, bool inverse) {
  for (int i = 0; i < kNumPinned; ++i) {
    const PinnedTile& t = kPinnedTiles[i];
    if (k.log2_th == t.log2_th && k.log2_tw == t.log2_tw && k.pairs == t.pairs &&
        (1 << k.log2_pairs) == k.pairs && k.row_pitch == RowPitch(t.log2_tw) &&
        k.pair_stride == PairStride(t.log2_th, t.log2_tw, t.pairs, inverse)) {
      return i;
    }
  }
  return -1;
}
// CTAs per kernel: ceil(N / 2P).
int FilterCtas(const KernelParams& k);
int InputCtas(const KernelParams& k);
int InverseCtas(const KernelParams& k);

// A runner with explicit options (the registered algorithm uses Options{}). Needs a GPU.
absl::StatusOr<std::unique_ptr<Runner>> CreateRunner(const Shape& shape, const Options& options);

// The steps of Run, in stream order (fft_fused_stages.h runs them one at a time).
enum Stage { kFilterStage, kInputStage, kMixStage, kInverseStage, kNumStages };

// ---- Host and device code ----------------------------------------------------------------------

#if defined(__CUDACC__)
using Cf = float2;
CONV2D_HOST_DEVICE inline Cf MakeCf(float x, float y) { return make_float2(x, y); }
#else
struct alignas(8) Cf {
  float x, y;
};
inline Cf MakeCf(float x, float y) { return Cf{x, y}; }
#endif

CONV2D_HOST_DEVICE inline Cf CAdd(Cf a, Cf b) { return MakeCf(a.x + b.x, a.y + b.y); }
CONV2D_HOST_DEVICE inline Cf CSub(Cf a, Cf b) { return MakeCf(a.x - b.x, a.y - b.y); }
CONV2D_HOST_DEVICE inline Cf CMul(Cf a, Cf b) {
  return MakeCf(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// Reverses the low `bits` bits of x.
CONV2D_HOST_DEVICE inline int BitReverse(int x, int bits) {
#if defined(__CUDA_ARCH__)
  return static_cast<int>(__brev(static_cast<unsigned>(x)) >> (32 - bits));
#else
  int r = 0;
  for (int i = 0; i < bits; ++i) r |= ((x >> i) & 1) << (bits - 1 - i);
  return r;
#endif
}

// exp(-2 pi i k / 128) for 0 <= k < 128, from double, rounded once. Computed from the first
// octant only, so that the table's symmetries hold exactly (W^64 = -1, W^32 = -i, |re| and |im|
// of W^j and W^(32-j) swapped).
CONV2D_HOST_DEVICE inline Cf Twiddle128(int k) {
  const bool negate = k >= 64;  // W^k = -W^(k-64)
  int j = negate ? k - 64 : k;
  const bool upper = j >= 32;  // W^k = -i W^(k-32)
  if (upper) j -= 32;
  const bool swap = j > 16;  // cos and sin of pi/2 - x
  if (swap) j = 32 - j;
  double s, c;
#if defined(__CUDA_ARCH__)
  sincospi(j / 64.0, &s, &c);
#else
  const double a = 3.14159265358979323846 * (j / 64.0);
  s = std::sin(a);
  c = std::cos(a);
#endif
  // First quadrant angle theta = pi k' / 64: (cos theta, sin theta).
  const double ct = swap ? s : c, st = swap ? c : s;
  // W = (cos, -sin); -i W = (-sin, -cos).
  const Cf w = upper ? MakeCf(static_cast<float>(-st), static_cast<float>(-ct))
                     : MakeCf(static_cast<float>(ct), static_cast<float>(-st));
  return negate ? MakeCf(-w.x, -w.y) : w;
}

// d * exp(-2 pi i k / n) for n in {2, 4, 8, 16}, k < n/2, with constant k and n after unrolling:
// the trivial ones cost no multiplies.
CONV2D_HOST_DEVICE inline Cf MulConstTwiddle(Cf d, int k, int n) {
  constexpr float kS = 0.707106781186547524401f;   // cos(pi/4)
  constexpr float kC8 = 0.923879532511286756128f;  // cos(pi/8)
  constexpr float kS8 = 0.382683432365089771728f;  // sin(pi/8)
  if (k == 0) return d;
  if (4 * k == n) return MakeCf(d.y, -d.x);                                      // -i
  if (8 * k == n) return MakeCf((d.x + d.y) * kS, (d.y - d.x) * kS);            // (1-i)/sqrt2
  if (8 * k == 3 * n) return MakeCf((d.y - d.x) * kS, -(d.x + d.y) * kS);       // (-1-i)/sqrt2
  // n == 16, k odd.
  Cf w = MakeCf(kC8, -kS8);
  if (k == 3) w = MakeCf(kS8, -kC8);
  if (k == 5) w = MakeCf(-kS8, -kC8);
  if (k == 7) w = MakeCf(-kC8, -kS8);
  return CMul(d, w);
}

// Shared-memory index of element (u, v) of pair p.
CONV2D_HOST_DEVICE inline int Addr(int pair_stride, int row_pitch, int p, int u, int v) {
  return p * pair_stride + u * row_pitch + v + (v >> 4);
}

// Reverses the low `bits` <= 4 bits of x (< 16) by a lookup in a 64-bit constant (nibble i holds
// the 4-bit reversal of i): for compile-time x and bits (unrolled loops) it folds to a constant,
// which neither __brev nor a loop over the bits reliably does.
CONV2D_HOST_DEVICE constexpr int BitReverseConst(int x, int bits) {
  return static_cast<int>((0xF7B3D591E6A2C480ull >> (4 * x)) & 0xF) >> (4 - bits);
}

// Radix-2 DIF stages [stage, stage + R) of one line of length 2^m, on the group `grp` of 2^R
// elements that those stages combine. Line element i is at base + i + (i >> 4) for a row
// (kRow), base + i * row_pitch for a column. kLast: stage + R == m. kZeroUpper (first pass only,
// stage 0): the line's second half is known to be zero, so it is neither read nor added.
//
// The group is the 2^R elements lo + t H (t < 2^R, H = 2^(m - stage - R)) of a block of
// L = 2^R H elements that the earlier passes left as an independent L-point DFT. Splitting that
// DFT as 2^R x H (four-step), the R stages are a 2^R-point DFT of the group whose twiddles are
// all constants, followed by one multiplication of output k by W_L^(lo k); in the bit-reversed
// order of radix-2 DIF, output k sits in slot t = bitrev_R(k). So each element takes at most one
// table twiddle per pass (none in the last pass, where H = 1 and lo = 0), instead of one per
// stage: fewer multiplies, loads and index computations than R stages of table twiddles.
template <int R, bool kRow, bool kLast, bool kZeroUpper, class Ctx>
CONV2D_HOST_DEVICE inline void DifGroup(Ctx& ctx, int base, int row_pitch, int m, int stage,
                                        int grp) {
  constexpr int kN = 1 << R;
  const int lg_hl = kLast ? 0 : m - stage - R;  // log2 H, the distance of the group's elements
  const int lo = kLast ? 0 : grp & ((1 << lg_hl) - 1);
  const int start = ((grp >> lg_hl) << (m - stage)) | lo;
  int at[kN];
  Cf v[kN];
CONV2D_UNROLL
  for (int t = 0; t < kN; ++t) {
    const int i = start + (t << lg_hl);
    at[t] = base + (kRow ? i + (i >> 4) : i * row_pitch);
    v[t] = kZeroUpper && t >= kN / 2 ? MakeCf(0.0f, 0.0f) : ctx.Ld(at[t]);
  }
CONV2D_UNROLL
  for (int q = 0; q < R; ++q) {
    const int hr = kN >> (q + 1);  // the stage's half distance, in group elements
CONV2D_UNROLL
    for (int t = 0; t < kN; ++t) {
      if (t & hr) continue;
      const Cf a = v[t], b = v[t + hr];
      const bool b_zero = kZeroUpper && q == 0;  // then v[t] stays a and d = a
      if (!b_zero) v[t] = CAdd(a, b);
      const Cf d = b_zero ? a : CSub(a, b);
      v[t + hr] = MulConstTwiddle(d, t & (hr - 1), 2 * hr);
    }
  }
  if (!kLast) {
    // W_L^(lo k) = W_128^((lo k) << (7 - log2 L)); lo k < L, so the index is < 128.
    const int shift = kMaxLog2Tile - (m - stage);
CONV2D_UNROLL
    for (int t = 1; t < kN; ++t) v[t] = CMul(v[t], ctx.Tw((lo * BitReverseConst(t, R)) << shift));
  }
CONV2D_UNROLL
  for (int t = 0; t < kN; ++t) ctx.St(at[t], v[t]);
}

// log2 of a power of two.
CONV2D_HOST_DEVICE inline int Log2Pow2(int x) {
#if defined(__CUDA_ARCH__)
  return __ffs(x) - 1;
#else
  return __builtin_ctz(static_cast<unsigned>(x));
#endif
}

// Rows [first, first + count) of a tile, with a divider by count (a multiply and a shift per
// item, where SplitIndex would divide: such counts are seldom powers of two).
struct RowSpan {
  int first, count;
  FastDiv by_count;
};

// it = rest * count + r, without a division when count is a power of two (the usual case).
CONV2D_HOST_DEVICE inline void SplitIndex(int it, int count, int* r, int* rest) {
  if ((count & (count - 1)) == 0) {
    *r = it & (count - 1);
    *rest = it >> Log2Pow2(count);
  } else {
    *rest = it / count;
    *r = it - *rest * count;
  }
}

// One pass over rows: lines are (p, u) for rows u of every pair; lanes take consecutive u.
// The rows are [0, rows) (an int), or a RowSpan's (fft_depthwise's rows that hold the image).
template <int R, bool kLast, bool kZeroUpper, class Rows, class Ctx>
CONV2D_HOST_DEVICE void RowPass(Ctx& ctx, const KernelParams& k, int pair_stride, Rows rows,
                                int stage) {
  const int m = k.log2_tw;
  const int lg_groups = m - R;
  int count;
  if constexpr (std::is_same_v<Rows, RowSpan>) {
    count = rows.count;
  } else {
    count = rows;
  }
  const int items = k.pairs * count << lg_groups;
  ctx.ForEach(items, [&](int it) {
    int r, rest;
    if constexpr (std::is_same_v<Rows, RowSpan>) {
      rows.by_count.DivMod(it, &rest, &r);
      r += rows.first;
    } else {
      SplitIndex(it, rows, &r, &rest);
    }
    const int grp = rest & ((1 << lg_groups) - 1);
    const int p = rest >> lg_groups;
    DifGroup<R, true, kLast, kZeroUpper>(ctx, Addr(pair_stride, k.row_pitch, p, r, 0),
                                         k.row_pitch, m, stage, grp);
  });
  ctx.Sync(kLast ? "row pass (last)" : "row pass");
}

// One pass over columns: lines are (p, v) with v = col(c) for c < cols; lanes take consecutive c.
// kBitrev: col(c) = bitreverse(c) (the inverse's pruned pass), else col(c) = c. The first
// cols & ~15 columns are dealt out in runs of 16 aligned to the half-warps (the row layout's
// padding makes each such run of bit-reversed columns hit 16 different banks); the remainder is
// a separate tail.
template <int R, bool kLast, bool kBitrev, bool kZeroUpper, class Ctx>
CONV2D_HOST_DEVICE void ColumnPass(Ctx& ctx, const KernelParams& k, int pair_stride, int cols,
                                   int stage) {
  const int m = k.log2_th;
  const int lg_groups = m - R;
  const int lines = k.pairs << lg_groups;  // (p, grp) per column
  const int aligned = cols & ~15, tail = cols - aligned;
  ctx.ForEach(lines * cols, [&](int it) {
    int c, rest;
    if (it < lines * aligned) {
      SplitIndex(it, aligned, &c, &rest);
    } else {
      SplitIndex(it - lines * aligned, tail, &c, &rest);
      c += aligned;
    }
    const int grp = rest & ((1 << lg_groups) - 1);
    const int p = rest >> lg_groups;
    const int v = kBitrev ? BitReverse(c, k.log2_tw) : c;
    DifGroup<R, false, kLast, kZeroUpper>(ctx, Addr(pair_stride, k.row_pitch, p, 0, v),
                                          k.row_pitch, m, stage, grp);
  });
  ctx.Sync(kLast ? "column pass (last)" : "column pass");
}

// The Tw-point FFTs of rows [0, rows), or of a RowSpan's rows, of every pair; output columns in
// bit-reversed order. kZeroUpper: columns >= Tw/2 of those rows are zero and need not be in
// shared memory.
template <bool kZeroUpper, class Rows, class Ctx>
CONV2D_HOST_DEVICE void RowFft(Ctx& ctx, const KernelParams& k, int pair_stride, Rows rows) {
  switch (k.log2_tw) {
    case 3: RowPass<3, true, kZeroUpper>(ctx, k, pair_stride, rows, 0); break;
    case 4: RowPass<4, true, kZeroUpper>(ctx, k, pair_stride, rows, 0); break;
    case 5:
      RowPass<2, false, kZeroUpper>(ctx, k, pair_stride, rows, 0);
      RowPass<3, true, false>(ctx, k, pair_stride, rows, 2);
      break;
    case 6:
      RowPass<3, false, kZeroUpper>(ctx, k, pair_stride, rows, 0);
      RowPass<3, true, false>(ctx, k, pair_stride, rows, 3);
      break;
    case 7:
      RowPass<3, false, kZeroUpper>(ctx, k, pair_stride, rows, 0);
      RowPass<4, true, false>(ctx, k, pair_stride, rows, 3);
      break;
    default: break;
  }
}

// The Th-point FFTs of columns col(c), c < cols, of every pair; output rows bit-reversed.
// kZeroUpper: rows >= Th/2 are zero and need not be in shared memory.
template <bool kBitrev, bool kZeroUpper, class Ctx>
CONV2D_HOST_DEVICE void ColumnFft(Ctx& ctx, const KernelParams& k, int pair_stride, int cols) {
  switch (k.log2_th) {
    case 3: ColumnPass<3, true, kBitrev, kZeroUpper>(ctx, k, pair_stride, cols, 0); break;
    case 4: ColumnPass<4, true, kBitrev, kZeroUpper>(ctx, k, pair_stride, cols, 0); break;
    case 5:
      ColumnPass<2, false, kBitrev, kZeroUpper>(ctx, k, pair_stride, cols, 0);
      ColumnPass<3, true, kBitrev, false>(ctx, k, pair_stride, cols, 2);
      break;
    case 6:
      ColumnPass<3, false, kBitrev, kZeroUpper>(ctx, k, pair_stride, cols, 0);
      ColumnPass<3, true, kBitrev, false>(ctx, k, pair_stride, cols, 3);
      break;
    case 7:
      ColumnPass<3, false, kBitrev, kZeroUpper>(ctx, k, pair_stride, cols, 0);
      ColumnPass<4, true, kBitrev, false>(ctx, k, pair_stride, cols, 3);
      break;
    default: break;
  }
}

// Global loads and stores (read-only cache and 16-byte vectors on the device).
// Two consecutive complex values at a 16-byte aligned address.
// The load asks L2 to fetch the 256 bytes around it (two lines) on a miss: the CTAs that read
// the other sectors (the next transforms at the same frequency) run at the same time. 256 bytes
// measured ~1% faster than 128 on this kernel, and 128 ~10% faster than no hint (PERF.md, 36-37).
CONV2D_HOST_DEVICE inline void LoadGlobalPair(const Cf* p, Cf* a, Cf* b) {
#if defined(__CUDA_ARCH__)
  float4 v;
  asm("ld.global.nc.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];\n"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "l"(p));
  *a = make_float2(v.x, v.y);
  *b = make_float2(v.z, v.w);
#else
  *a = p[0];
  *b = p[1];
#endif
}
CONV2D_HOST_DEVICE inline Cf LoadGlobalCf(const Cf* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}
CONV2D_HOST_DEVICE inline void StoreGlobalPair(Cf* p, Cf a, Cf b) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(p) = make_float4(a.x, a.y, b.x, b.y);
#else
  p[0] = a;
  p[1] = b;
#endif
}

// ---- What the FFT handles badly, taken out of it and added back exactly ------------------------
//
// An FFT convolution's rounding error at every output of a tile grows with the energy of the
// whole tile (all its elements, all its channels), where direct summation's grows with each
// output's own terms. So one large element of x (or tap of w) spoils every output of its tile,
// and so does a large mean. Before its FFT, each transform (one channel of one x tile, or one
// filter) is cleaned, in shared memory, in the kernel that already holds it:
//   - x only: if |mean| > rms / 4, the mean of the in-bounds elements is subtracted, and
//     Th*Tw*mean is added back at the DC bin of its spectrum: the transform is then that of the
//     tile with the mean in place of every zero outside the image. Without padding the valid
//     outputs of a tile read only in-bounds elements, so for them this is exact: it moves the
//     constant out of the rounding of every butterfly. With padding an output whose window
//     reaches into the padding read the mean there instead of zero: the mean is published
//     (SparseLists::x_mean) and the inverse subtracts, from each such output, mean times the
//     sum of the (cleaned) filter's taps that fall outside the image (PaddingMeanCorrection),
//     in double, from w itself.
//   - every non-finite element, and every element v with v^2 > kOutlierRatio^2 * (mean square of
//     the other elements) (never for Gaussian data: P(|v| > 8 sigma) ~ 1e-15), is set to zero
//     and its value appended to the transform's list in the workspace, if at most
//     max(2, N/128) of them do so (outliers are rare by definition). Two rounds, for outliers of
//     several magnitudes. The inverse kernel adds each listed value's exact contribution
//     (value times the other operand, fp32) to the outputs that read it, so a non-finite input
//     reaches exactly the outputs whose window holds it, as with direct summation.
//   - a transform with more such elements than that, whose candidates hold more than 15/16 of its
//     energy (or any non-finite one), is "unresolved": the inverse computes every output of the
//     tiles it feeds by direct summation in double (slow, exact; only for such data). Below
//     15/16 the candidates at most quadruple the tile's rms, which the FFT's margin on randn
//     data (>= 15x on every benchmark case) absorbs.
// The statistics cost one read of the transform in shared memory on ordinary data; the inverse
// kernel reads one word per CTA to learn that nothing was removed (SparseLists::flag).

// One value left out of a transform: at element (u, v) of an x tile or filter tap (u, v), value r
// (for x, after the mean is subtracted).
struct Removed {
  int16_t u, v;
  float r;
};
constexpr int kMaxRemovedX = 32;   // per x transform
constexpr int kMaxRemovedW = 8;    // per filter
constexpr int kUnresolved = -1;    // a count: the transform could not be cleaned
constexpr float kOutlierRatio = 8.0f;
constexpr float kSpikesRatio = 6.0f;  // Judge: several spikes (max against the rms of all)

// In the workspace. Counts are written by their transform's CTA on every call (0 when nothing
// was removed), so nothing needs zeroing. `flag` is set to the call's epoch, a value unique to
// the call, when any count of the call is nonzero (or, padded, any x_mean); the inverse scans
// the counts only then (a stale equal value, as in CUDA graph replays, only costs that scan).
// The host gives the epoch to the filter kernel only (`epoch`), whose CTA 0 stores it at
// `call_epoch`; the input kernel, once it has waited for the filter kernel, and the inverse read
// it there (their `epoch` is 0). So of the call's kernels only the filter kernel's arguments
// change from one call to the next: where Plan::Run replays a graph, one node is updated a call,
// not three (PERF.md, open hypothesis 8).
struct SparseLists {
  int* x_count = nullptr;      // [M][Cin]: x transform c*M + m at m*Cin + c
  // Padded shapes only (else nullptr): [M][Cin] like x_count, the mean CleanTransforms
  // subtracted from the x transform (0 if none), written on every call; a nonzero one sets the
  // flag too.
  float* x_mean = nullptr;
  // Padded shapes only: [M], set to `epoch` by every x transform of tile m whose mean was
  // subtracted, so that PaddingMeanCorrection passes over the tiles that had none (on randn a
  // few small corner tiles: with the flag alone every border output of the call summed all Cin
  // means, 7x the unpadded call's time at Cin = 256-512, PERF.md round 89).
  unsigned long long* x_mean_tile = nullptr;
  Removed* x_list = nullptr;   // [M][Cin][kMaxRemovedX]
  int* w_count = nullptr;      // [Cout][Cin]: filter (o, c) at o*Cin + c
  Removed* w_list = nullptr;   // [Cout][Cin][kMaxRemovedW]
  unsigned long long* flag = nullptr;
  unsigned long long* call_epoch = nullptr;  // the call's epoch, stored by the filter kernel
  unsigned long long epoch = 0;               // the filter kernel's only (see above)
};
size_t SparseBytes(const Shape& shape, const Geometry& g);
// The lists laid out from `base` (aligned to 16 bytes).
SparseLists MakeSparseLists(void* base, const Shape& shape, const Geometry& g,
                            unsigned long long epoch);

// What the inverse reads besides the output spectrum: the lists, and x and w themselves.
struct SparseInputs {
  SparseLists lists;
  const float* x = nullptr;
  const float* w = nullptr;
};

// Per transform, in shared memory.
struct TransformStats {
  double sum, sumsq;     // over the finite elements of the region
  double cand_energy;    // of this round's candidates
  unsigned max_bits;     // max |v| over the finite elements, as float bits (ordered as integers)
  int nonfinite;
  int cand_count;
  int removed;           // appended to the list so far (may pass the cap: then unresolved)
  int unresolved;
  int removing;          // this round's candidates are being removed
  float mean;            // subtracted (x only)
};

// Shared-memory atomics (the host runs items one after another: plain operations).
CONV2D_HOST_DEVICE inline void AtomicAddD(double* p, double v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}
CONV2D_HOST_DEVICE inline int AtomicAddI(int* p, int v) {
#if defined(__CUDA_ARCH__)
  return atomicAdd(p, v);
#else
  const int old = *p;
  *p += v;
  return old;
#endif
}
CONV2D_HOST_DEVICE inline void AtomicMaxU(unsigned* p, unsigned v) {
#if defined(__CUDA_ARCH__)
  atomicMax(p, v);
#else
  if (v > *p) *p = v;
#endif
}
CONV2D_HOST_DEVICE inline bool IsFinite(float v) { return fabsf(v) <= 3.402823466e38f; }

// sum + comp += v, exactly (Knuth's TwoSum): comp carries what the float sum rounds away.
CONV2D_HOST_DEVICE inline void TwoSumAdd(float v, float* sum, float* comp) {
  const float t = *sum + v, bv = t - *sum;
  *comp += (*sum - (t - bv)) + (v - bv);
  *sum = t;
}

// One item's share of a statistic, combined over the items of a warp (which all belong to one
// pair, see ForEachPairSlice) before one atomic per warp on the device.
struct Partial {
  float sum = 0, comp = 0;  // sum + comp: the exact sum of this item's elements (TwoSum)
  float sumsq = 0;          // (overflows past |v| ~ 1e18, which only turns spike detection off)
  float max = 0;
  int nonfinite = 0;
  CONV2D_HOST_DEVICE void Add(float v) {
    if (IsFinite(v)) {
      TwoSumAdd(v, &sum, &comp);
      sumsq = fmaf(v, v, sumsq);
      max = fmaxf(max, fabsf(v));
    } else {
      ++nonfinite;
    }
  }
};
CONV2D_HOST_DEVICE inline void Publish(TransformStats* s, const Partial& p) {
  double sum = static_cast<double>(p.sum) + p.comp, sumsq = p.sumsq;
  float mx = p.max;
  int nonfinite = p.nonfinite;
#if defined(__CUDA_ARCH__)
  CONV2D_UNROLL
  for (int off = 16; off > 0; off >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
    sumsq += __shfl_xor_sync(0xffffffffu, sumsq, off);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    nonfinite += __shfl_xor_sync(0xffffffffu, nonfinite, off);
  }
  if ((threadIdx.x & 31) != 0) return;
#endif
  if (sum != 0) AtomicAddD(&s->sum, sum);
  if (sumsq != 0) AtomicAddD(&s->sumsq, sumsq);
  if (mx > 0) AtomicMaxU(&s->max_bits, FloatBits(mx));
  if (nonfinite) AtomicAddI(&s->nonfinite, nonfinite);
}

// Items over the elements (u < rows, v < 2^log2_cols) of every pair: each pair gets L items, a
// multiple of 32 (so a warp never spans two pairs), item r of pair p taking elements
// e = r + j L (u = e >> log2_cols, v = e & (cols - 1)). f(p, u, v) per element; done(p) once
// per item after its elements.
template <class Ctx, class F, class Done>
CONV2D_HOST_DEVICE void ForEachPairSlice(Ctx& ctx, const KernelParams& k, int rows, int log2_cols,
                                         F&& f, Done&& done) {
  const int elements = rows << log2_cols;
  int per_pair = kThreads / k.pairs;
  if (per_pair < 32) per_pair = 32;
  while (per_pair > 32 && per_pair > elements) per_pair >>= 1;
  ctx.ForEach(k.pairs * per_pair, [&](int it) {
    const int p = it / per_pair, r = it - p * per_pair;
    for (int e = r; e < elements; e += per_pair) f(p, e >> log2_cols, e & ((1 << log2_cols) - 1));
    done(p);
  });
}

// The number of region elements of transform g that are real data (in-bounds x, or filter taps).
CONV2D_HOST_DEVICE inline int ValidCount(const TransformMeta& t, int rows, int cols) {
  const int r = (t.rows < rows ? t.rows : rows) - t.row0;
  const int c = (t.cols < cols ? t.cols : cols) - t.col0;
  return r > 0 && c > 0 ? r * c : 0;
}

struct Verdict {
  bool check;   // look for candidates
  bool spikes;  // the finite ones too: |v| > thr (else only the non-finite ones)
  float thr;
};
// Whether transform g may hold spikes: a non-finite element, or a maximum 8x the rms of the
// others (one spike; this is what finds a large tap in a 3x3 filter), or kSpikesRatio x the rms
// of all (several spikes, fewer than N / kSpikesRatio^2 of them: each raises the others' rms).
// A false alarm sends the CTA down CleanTransformsSlow for nothing, so the ratio is set where
// Gaussian data almost never reaches it: P(|v| > 6 sigma) = 2.0e-9 per element, one 64x64 x
// transform in ~10^5 (at 5 sigma, 5.7e-7, about 15 CTAs of each call on KernelBot's case 3 took
// the slow path: PERF.md round 85). A spike that matters to the FFT's error stands far higher:
// it must add to the tile's energy (|v|^2 comparable to N rms^2) to spoil the bar. The
// candidates are the elements above max / 8.
CONV2D_HOST_DEVICE inline Verdict Judge(const TransformStats& s, int n) {
  Verdict v{false, false, 0.0f};
  if (n <= 0 || s.unresolved) return v;
  const double mx = BitsFloat(s.max_bits), r2 = kOutlierRatio * kOutlierRatio;
  v.thr = static_cast<float>(mx / kOutlierRatio);
  if (n >= 9) {  // fewer elements say nothing about what is typical (3x3 filters have 9)
    v.spikes = mx * mx * (n - 1) > r2 * (s.sumsq - mx * mx);
  }
  if (n >= 64) v.spikes = v.spikes || mx * mx * n > kSpikesRatio * kSpikesRatio * s.sumsq;
  v.check = v.spikes || s.nonfinite > 0;
  return v;
}
CONV2D_HOST_DEVICE inline bool IsCandidate(float v, const Verdict& j) {
  return !IsFinite(v) || (j.spikes && fabsf(v) > j.thr);
}

CONV2D_HOST_DEVICE inline void ZeroStat(TransformStats& s, bool keep_lists) {
  s.sum = s.sumsq = s.cand_energy = 0;
  s.max_bits = 0;
  s.nonfinite = s.cand_count = s.removing = 0;
  if (!keep_lists) {
    s.removed = s.unresolved = 0;
    s.mean = 0;
  }
}
template <class Ctx>
CONV2D_HOST_DEVICE void ZeroStats(Ctx& ctx, const KernelParams& k) {
  ctx.ForEach(2 * k.pairs, [&](int g) { ZeroStat(ctx.transform_stats()[g], true); });
  ctx.Sync("zero stats");
}

template <class Ctx>
CONV2D_HOST_DEVICE void GatherStats(Ctx& ctx, const KernelParams& k, int rows, int log2_cols) {
  Partial a[2];
  ForEachPairSlice(
      ctx, k, rows, log2_cols,
      [&](int p, int u, int v) {
        const Cf z = ctx.Ld(Addr(k.pair_stride, k.row_pitch, p, u, v));
        a[0].Add(z.x);
        a[1].Add(z.y);
      },
      [&](int p) {
        Publish(&ctx.transform_stats()[2 * p], a[0]);
        Publish(&ctx.transform_stats()[2 * p + 1], a[1]);
        a[0] = a[1] = Partial{};
      });
  ctx.Sync("stats");
}

// Whether the mean of transform s (n data elements) is large enough to subtract: |mean| > rms/4.
CONV2D_HOST_DEVICE inline bool MeanIsLarge(const TransformStats& s, int n) {
  return n > 0 && 16.0 * s.sum * s.sum > static_cast<double>(n) * s.sumsq;
}

// One warp's share of a transform's quick statistics (QuickStats). Written by the warp's first
// lane, read by the transform's judge: no shared-memory atomics, which on sm_90 are
// compare-and-swap loops for float and double (SASS: ATOMS.CAST.SPIN).
struct StatSlot {
  double sum;         // compensated for the filters (their DC bins)
  float sumsq;        // non-finite if an element is, or overflows (|v| > ~1.8e19)
  unsigned max_bits;  // max |v| over the finite elements, as float bits
};
// QuickStats' items per pair (log2): a pair's items fill whole warps, at most kThreads / P, and
// no more than a sixteenth of the region's elements (but a warp): each warp's reduction (about 60
// instructions a lane, against 8 per element) is then spread over at least 16 elements a lane.
// With one or two elements a lane (the filters: a 16x16 filter is 512 elements of its region at
// P = 2) the reductions were most of QuickStats' cost.
CONV2D_HOST_DEVICE inline int QuickItemsLog2(const KernelParams& k, int rows, int log2_cols) {
  const int log2_elements = CeilLog2(rows) + log2_cols;
  int log2_per = kLog2Threads - k.log2_pairs;
  if (log2_per < 5) log2_per = 5;
  while (log2_per > 5 && log2_per > log2_elements - 4) --log2_per;
  return log2_per;
}
// Slots in shared memory: one per warp of QuickStats' items, for every P and region (16 when
// P <= 8: a pair has at most kThreads / P items).
CONV2D_HOST_DEVICE constexpr int StatSlotCount(int log2_pairs) {
  return log2_pairs <= 3 ? 16 : 2 << log2_pairs;
}

// The statistics the common case needs, at a few instructions per element: sum (compensated if
// kCompensated, for the filters' DC bin), sum of squares and max |v|, reduced over each warp in
// float (the compensated sum in double) into its StatSlot; then each transform judged by one
// thread (Judge, MeanIsLarge) and the verdict shared by a barrier. A non-finite element shows as
// a non-finite sum of squares (so does an overflowing one: both send the CTA to
// CleanTransformsSlow, which counts them exactly). Leaves each transform's sum, sum of squares
// and max in transform_stats() (the filters' sums feed their DC bins); returns whether any
// transform of the CTA needs CleanTransformsSlow (CTA-uniform).
template <bool kCompensated, class Ctx>
CONV2D_HOST_DEVICE bool QuickStats(Ctx& ctx, const KernelParams& k, int rows, int log2_cols,
                                   bool subtract_mean) {
  const int log2_per = QuickItemsLog2(k, rows, log2_cols);
  const int log2_elements = CeilLog2(rows) + log2_cols;
  const int count = log2_elements >= log2_per ? 1 << (log2_elements - log2_per) : 0;
  const int elements = rows << log2_cols, mask = (1 << log2_cols) - 1;
  const int warps = 1 << (log2_per - 5);  // slots per transform
  ctx.ForEach(k.pairs << log2_per, [&](int it) {
    const int p = it >> log2_per, r = it & ((1 << log2_per) - 1);
    float sum[2] = {0, 0}, comp[2] = {0, 0}, sq[2] = {0, 0}, mx[2] = {0, 0};
    auto add = [&](int e) {
      const Cf z = ctx.Ld(Addr(k.pair_stride, k.row_pitch, p, e >> log2_cols, e & mask));
      const float v[2] = {z.x, z.y};
      CONV2D_UNROLL
      for (int h = 0; h < 2; ++h) {
        if (kCompensated) {
          TwoSumAdd(v[h], &sum[h], &comp[h]);
        } else {
          sum[h] += v[h];
        }
        sq[h] = fmaf(v[h], v[h], sq[h]);
        mx[h] = fmaxf(mx[h], fabsf(v[h]));
      }
    };
    CONV2D_UNROLL
    for (int j = 0; j < count; ++j) add(r + (j << log2_per));
    if (count == 0 && r < elements) add(r);
    CONV2D_UNROLL
    for (int h = 0; h < 2; ++h) {
      double total = static_cast<double>(sum[h]) + comp[h];
      float fsum = sum[h], squares = sq[h];
      unsigned max_bits = FloatBits(mx[h]);
#if defined(__CUDA_ARCH__)
      max_bits = __reduce_max_sync(0xffffffffu, max_bits);
      CONV2D_UNROLL
      for (int off = 16; off > 0; off >>= 1) {
        if (kCompensated) {
          total += __shfl_xor_sync(0xffffffffu, total, off);
        } else {
          fsum += __shfl_xor_sync(0xffffffffu, fsum, off);
        }
        squares += __shfl_xor_sync(0xffffffffu, squares, off);
      }
#endif
      if (!kCompensated) total = fsum;
      // The host runs the items in order: a warp's first stores, the others add.
      StatSlot& slot = ctx.stat_slots()[(2 * p + h) * warps + (r >> 5)];
      if ((r & 31) == 0) {
        slot = StatSlot{total, squares, max_bits};
      } else {
#if !defined(__CUDA_ARCH__)
        slot.sum += total;
        slot.sumsq += squares;
        slot.max_bits = max_bits > slot.max_bits ? max_bits : slot.max_bits;
#endif
      }
    }
  });
  ctx.Sync("stats");
  ctx.ForEach(2 * k.pairs, [&](int g) {
    TransformStats& s = ctx.transform_stats()[g];
    double sum = 0, sumsq = 0;
    unsigned max_bits = 0;
    for (int i = 0; i < warps; ++i) {
      const StatSlot& slot = ctx.stat_slots()[g * warps + i];
      sum += slot.sum;
      sumsq += slot.sumsq;
      max_bits = slot.max_bits > max_bits ? slot.max_bits : max_bits;
    }
    s.sum = sum;
    s.sumsq = sumsq;
    s.max_bits = max_bits;
    s.nonfinite = IsFinite(static_cast<float>(sumsq)) ? 0 : 1;
    const int n = ValidCount(ctx.meta()[g], rows, 1 << log2_cols);
    if (Judge(s, n).check || (subtract_mean && MeanIsLarge(s, n))) ctx.Flag();
  });
  return ctx.SyncAny("decide");
}

// Cleans the 2P transforms in shared memory (region rows x 2^log2_cols; valid(g) elements are
// data). lists(g) is transform g's list (nullptr past the end), cap its capacity. Leaves in
// ctx.transform_stats() each transform's mean, removed count and unresolved flag. Returns whether any
// transform of the CTA has a nonzero count (CTA-uniform).
template <class Ctx, class ListFn>
CONV2D_HOST_DEVICE void CleanTransformsSlow(Ctx& ctx, const KernelParams& k, int rows, int log2_cols,
                                         bool subtract_mean, int cap, ListFn lists);

// Setup zeroed the statistics. Whether the CTA's transforms need cleaning (CTA-uniform): one
// pass and two barriers, all the common case costs. The filters' sums feed their DC bins
// (StoreSpectrum): compensated there.
template <class Ctx>
CONV2D_HOST_DEVICE bool NeedsCleaning(Ctx& ctx, const KernelParams& k, int rows, int log2_cols,
                                      bool subtract_mean) {
  return subtract_mean ? QuickStats<false>(ctx, k, rows, log2_cols, true)
                       : QuickStats<true>(ctx, k, rows, log2_cols, false);
}

// After NeedsCleaning said so: CleanTransformsSlow, and whether any transform of the CTA has a
// nonzero count (CTA-uniform). FilterCta and InputCta run their transforms after this in a copy
// of their own, apart from the common path's (PERF.md, round 85).
template <class Ctx, class ListFn>
CONV2D_HOST_DEVICE bool CleanTransforms(Ctx& ctx, const KernelParams& k, int rows, int log2_cols,
                                        bool subtract_mean, int cap, ListFn lists) {
  const int G = 2 * k.pairs;
  CleanTransformsSlow(ctx, k, rows, log2_cols, subtract_mean, cap, lists);
  bool any = false;
  for (int g = 0; g < G; ++g) {
    const TransformStats& s = ctx.transform_stats()[g];
    any = any || s.removed > 0 || s.unresolved;
  }
  return any;
}

template <class Ctx, class ListFn>
CONV2D_HOST_DEVICE void CleanTransformsSlow(Ctx& ctx, const KernelParams& k, int rows, int log2_cols,
                                         bool subtract_mean, int cap, ListFn lists) {
  const int cols = 1 << log2_cols, G = 2 * k.pairs;
  auto valid = [&](int g) { return ValidCount(ctx.meta()[g], rows, cols); };
  // The exact statistics (QuickStats only decided that there is work; its barrier is behind us).
  ZeroStats(ctx, k);
  GatherStats(ctx, k, rows, log2_cols);
  if (subtract_mean) {
    bool any = false;
    for (int g = 0; g < G; ++g) {
      const TransformStats& s = ctx.transform_stats()[g];
      const int n = valid(g);
      any = any || MeanIsLarge(s, n);
    }
    if (any) {
      ForEachPairSlice(
          ctx, k, rows, log2_cols,
          [&](int p, int u, int v) {
            const int i = Addr(k.pair_stride, k.row_pitch, p, u, v);
            Cf z = ctx.Ld(i);
            float* e[2] = {&z.x, &z.y};
            CONV2D_UNROLL
            for (int h = 0; h < 2; ++h) {
              const int g = 2 * p + h;
              const TransformStats& s = ctx.transform_stats()[g];
              const TransformMeta& t = ctx.meta()[g];
              const int n = valid(g);
              if (MeanIsLarge(s, n) && Inside(t, u, v)) {
                *e[h] -= static_cast<float>(s.sum / n);
              }
            }
            ctx.St(i, z);
          },
          [](int) {});
      ctx.Sync("subtract mean");
      ctx.ForEach(G, [&](int g) {
        TransformStats& s = ctx.transform_stats()[g];
        const int n = valid(g);
        if (MeanIsLarge(s, n)) {
          s.mean = static_cast<float>(s.sum / n);
        }
      });
      ctx.Sync("mean");
      ZeroStats(ctx, k);
      GatherStats(ctx, k, rows, log2_cols);
    }
  }
  for (int round = 0; round < 2; ++round) {
    bool any = false;
    for (int g = 0; g < G; ++g) any = any || Judge(ctx.transform_stats()[g], valid(g)).check;
    if (!any) break;
    // Count the candidates and their energy.
    int count[2] = {0, 0};
    double energy[2] = {0, 0};
    ForEachPairSlice(
        ctx, k, rows, log2_cols,
        [&](int p, int u, int v) {
          const Cf z = ctx.Ld(Addr(k.pair_stride, k.row_pitch, p, u, v));
          const float e[2] = {z.x, z.y};
          CONV2D_UNROLL
          for (int h = 0; h < 2; ++h) {
            const int g = 2 * p + h;
            if (IsCandidate(e[h], Judge(ctx.transform_stats()[g], valid(g)))) {
              ++count[h];
              if (IsFinite(e[h])) energy[h] += static_cast<double>(e[h]) * e[h];
            }
          }
        },
        [&](int p) {
          CONV2D_UNROLL
          for (int h = 0; h < 2; ++h) {
            if (count[h]) {
              AtomicAddI(&ctx.transform_stats()[2 * p + h].cand_count, count[h]);
              AtomicAddD(&ctx.transform_stats()[2 * p + h].cand_energy, energy[h]);
            }
            count[h] = 0;
            energy[h] = 0;
          }
        });
    ctx.Sync("candidates");
    // The candidates are spikes if they stand 8x above the rms of the rest. Spikes are removed
    // where they are few (at most max(2, N/128), and room in the list); in the first round,
    // spikes too many to remove but fewer than N / kSpikesRatio^2 (what Judge can see) make the
    // transform unresolved, as does any non-finite element left. Decided once per transform,
    // before the pass, since the pass moves `removed`.
    ctx.ForEach(G, [&](int g) {
      TransformStats& s = ctx.transform_stats()[g];
      const int n = valid(g);
      if (s.cand_count == 0) return;
      const double mx = BitsFloat(s.max_bits);
      const int finite_cands = s.cand_count - s.nonfinite;
      const double rest = n > finite_cands ? (s.sumsq - s.cand_energy) / (n - finite_cands) : 0.0;
      const bool spiky = mx * mx > kOutlierRatio * kOutlierRatio * (rest > 0 ? rest : 0.0);
      const int limit = n / 128 > 2 ? n / 128 : 2;
      s.removing = (spiky || s.nonfinite > 0) && s.cand_count <= limit &&
                   s.removed + s.cand_count <= cap && lists(g) != nullptr;
      if (!s.removing &&
          (s.nonfinite > 0 || (round == 0 && spiky &&
                                       kSpikesRatio * kSpikesRatio * finite_cands < n))) {
        s.unresolved = 1;
      }
    });
    ctx.Sync("verdicts");
    bool any_remove = false;
    for (int g = 0; g < G; ++g) any_remove = any_remove || ctx.transform_stats()[g].removing;
    if (any_remove) {
      ForEachPairSlice(
          ctx, k, rows, log2_cols,
          [&](int p, int u, int v) {
            const int i = Addr(k.pair_stride, k.row_pitch, p, u, v);
            Cf z = ctx.Ld(i);
            float* e[2] = {&z.x, &z.y};
            bool changed = false;
            CONV2D_UNROLL
            for (int h = 0; h < 2; ++h) {
              const int g = 2 * p + h;
              TransformStats& s = ctx.transform_stats()[g];
              if (!s.removing || !IsCandidate(*e[h], Judge(s, valid(g)))) continue;
              const int slot = AtomicAddI(&s.removed, 1);
              if (slot < cap) {
                lists(g)[slot] = Removed{static_cast<int16_t>(u), static_cast<int16_t>(v), *e[h]};
              }
              *e[h] = 0.0f;
              changed = true;
            }
            if (changed) ctx.St(i, z);
          },
          [](int) {});
      ctx.Sync("remove");
    }
    if (!any_remove) break;
    ZeroStats(ctx, k);
    GatherStats(ctx, k, rows, log2_cols);
  }
  bool any_unresolved = false;
  for (int g = 0; g < G; ++g) any_unresolved = any_unresolved || ctx.transform_stats()[g].unresolved;
  // An unresolved transform's outputs are all recomputed directly, but it shares its complex FFT
  // with its pair's other transform, which its rounding errors would reach: it is zeroed.
  if (any_unresolved) {
    ForEachPairSlice(
        ctx, k, rows, log2_cols,
        [&](int p, int u, int v) {
          const bool re = ctx.transform_stats()[2 * p].unresolved != 0;
          const bool im = ctx.transform_stats()[2 * p + 1].unresolved != 0;
          if (!re && !im) return;
          const int i = Addr(k.pair_stride, k.row_pitch, p, u, v);
          const Cf z = ctx.Ld(i);
          ctx.St(i, MakeCf(re ? 0.0f : z.x, im ? 0.0f : z.y));
        },
        [](int) {});
    ctx.ForEach(G, [&](int g) {
      TransformStats& s = ctx.transform_stats()[g];
      if (s.unresolved) {
        s.mean = 0.0f;
        s.sum = 0;
      }
    });
    ctx.Sync("zero unresolved");
  }
}

// The count to publish for transform g.
CONV2D_HOST_DEVICE inline int PublishedCount(const TransformStats& s, int cap) {
  return s.unresolved || s.removed > cap ? kUnresolved : s.removed;
}

// Writes transform g's count (and the call's flag) after CleanTransforms; and its subtracted
// mean where mean_slot(g) gives a place for it (x transforms of padded shapes), setting the flag
// when that mean is nonzero (the inverse's PaddingMeanCorrection needs it).
template <class Ctx, class SlotFn, class MeanFn>
CONV2D_HOST_DEVICE void PublishCounts(Ctx& ctx, const KernelParams& k, bool any, int cap,
                                      const SparseLists& lists, SlotFn count_slot,
                                      MeanFn mean_slot) {
  ctx.ForEach(2 * k.pairs, [&](int g) {
    const TransformStats& s = ctx.transform_stats()[g];
    int* slot = count_slot(g);
    if (slot != nullptr) *slot = PublishedCount(s, cap);
    float* mean = mean_slot(g);
    if (mean != nullptr) *mean = s.mean;
    if (mean != nullptr && s.mean != 0.0f) {
      // Every transform of the tile that subtracted one writes the same value: no race.
      lists.x_mean_tile[(mean - lists.x_mean) / k.d.in_channels] = lists.epoch;
    }
    if ((g == 0 && any) || (mean != nullptr && s.mean != 0.0f)) *lists.flag = lists.epoch;
  });
}
template <class Ctx, class SlotFn>
CONV2D_HOST_DEVICE void PublishCounts(Ctx& ctx, const KernelParams& k, bool any, int cap,
                                      const SparseLists& lists, SlotFn count_slot) {
  PublishCounts(ctx, k, any, cap, lists, count_slot, [](int) -> float* { return nullptr; });
}

// The inverse's output (i, j) of transform g sits at (bitrev i, bitrev j) of pair g / 2: the real
// part for even g, minus the imaginary part for odd g.
CONV2D_HOST_DEVICE inline int OutputAddr(const KernelParams& k, int g, int i, int j) {
  return Addr(k.pair_stride, k.row_pitch, g >> 1, BitReverse(i, k.log2_th),
              BitReverse(j, k.log2_tw));
}

// Adds the exact contributions of the removed values to the CTA's outputs (in shared memory,
// after the inverse FFT): for output transform (o, m) and every channel c, x's values removed
// from tile m times the full filter, the full x times the taps removed from filter (o, c), less
// their product (counted twice). Marks in stats()[g].unresolved the transforms fed by an
// unresolved one; returns whether there are any (CTA-uniform).
template <class Ctx>
CONV2D_HOST_DEVICE bool AddRemovedParts(Ctx& ctx, const KernelParams& k, const SparseInputs& sp,
                                        int n0) {
  const Dims& d = k.d;
  const int G = 2 * k.pairs, cin = d.in_channels, kh = d.kernel_h, kw = d.kernel_w;
  ctx.ForEach(G * cin, [&](int it) {
    const int g = it & (G - 1), c = it >> (k.log2_pairs + 1);
    const int n = n0 + g;
    if (n >= k.n_output) return;
    const int o = n / d.tiles, m = n - o * d.tiles;
    const int cx = sp.lists.x_count[m * cin + c], cw = sp.lists.w_count[o * cin + c];
    if (cx == kUnresolved || cw == kUnresolved) {
      ctx.transform_stats()[g].unresolved = 1;
      ctx.Flag();
      return;
    }
    if (cx == 0 && cw == 0) return;
    const TransformMeta t = ctx.meta()[g];
    const Removed* lx = sp.lists.x_list + static_cast<int64_t>(m * cin + c) * kMaxRemovedX;
    const Removed* lw = sp.lists.w_list + static_cast<int64_t>(o * cin + c) * kMaxRemovedW;
    const float* wf = sp.w + static_cast<int64_t>(o * cin + c) * kh * kw;
    const fft_tiled::TileOrigin to = fft_tiled::OriginOf(d, m);
    // The image position of tile element (0, 0) (negative in the top or left padding).
    const int r0 = to.row - k.pad_top, c0 = to.col - k.pad_left;
    const float* xc = sp.x + static_cast<int64_t>(to.b * cin + c) * d.height * d.width;
    auto add = [&](int i, int j, float v) { ctx.AddData(OutputAddr(k, g, i, j), g & 1, (g & 1) ? -v : v); };
    for (int e = 0; e < cx; ++e) {
      const Removed r = lx[e];
      for (int p = 0; p < kh; ++p) {
        const int i = r.u - p;
        if (i < 0 || i >= t.rows) continue;
        for (int q = 0; q < kw; ++q) {
          const int j = r.v - q;
          if (j >= 0 && j < t.cols) add(i, j, r.r * wf[p * kw + q]);
        }
      }
    }
    for (int e = 0; e < cw; ++e) {
      const Removed r = lw[e];
      // The padding is zeros that are multiplied (conv.h): a non-finite tap reaches the outputs
      // that read it there too.
      for (int i = 0; i < t.rows; ++i) {
        const int row = r0 + i + r.u;
        const bool row_in = row >= 0 && row < d.height;
        for (int j = 0; j < t.cols; ++j) {
          const int col = c0 + j + r.v;
          const float xv = row_in && col >= 0 && col < d.width
                               ? xc[static_cast<int64_t>(row) * d.width + col]
                               : 0.0f;
          add(i, j, r.r * xv);
        }
      }
      for (int e2 = 0; e2 < cx; ++e2) {
        const Removed rx = lx[e2];
        const int i = rx.u - r.u, j = rx.v - r.v;
        if (i >= 0 && i < t.rows && j >= 0 && j < t.cols) add(i, j, -(rx.r * r.r));
      }
    }
  });
  return ctx.SyncAny("removed parts");
}

// f(g, i, j, o, m) for every valid output (i, j) of the CTA's output transforms g (transform
// n0 + g: output channel o, tile m), one item each, for the inverse's rare paths.
template <class Ctx, class F>
CONV2D_HOST_DEVICE void ForEachTileOutput(Ctx& ctx, const KernelParams& k, int n0, F&& f) {
  const Dims& d = k.d;
  const int per = d.step_h * d.step_w;
  ctx.ForEach(2 * k.pairs * per, [&](int it) {
    const int g = it / per, ij = it - g * per, i = ij / d.step_w, j = ij - i * d.step_w;
    const TransformMeta t = ctx.meta()[g];
    if (i >= t.rows || j >= t.cols) return;
    const int n = n0 + g, o = n / d.tiles, m = n - o * d.tiles;
    f(g, i, j, o, m);
  });
}

// Every output of the unresolved transforms, by direct summation in double from x and w.
template <class Ctx>
CONV2D_HOST_DEVICE void DirectFallback(Ctx& ctx, const KernelParams& k, const SparseInputs& sp,
                                       int n0) {
  const Dims& d = k.d;
  const int cin = d.in_channels, kh = d.kernel_h, kw = d.kernel_w;
  ForEachTileOutput(ctx, k, n0, [&](int g, int i, int j, int o, int m) {
    if (!ctx.transform_stats()[g].unresolved) return;
    const fft_tiled::TileOrigin to = fft_tiled::OriginOf(d, m);
    // The window's top-left in the image (outside it in the padding, whose zeros are multiplied
    // as conv.h says: a non-finite tap there still reaches the output).
    const int r = to.row + i - k.pad_top, cc = to.col + j - k.pad_left;
    double acc = 0;
    for (int c = 0; c < cin; ++c) {
      const float* xc = sp.x + static_cast<int64_t>(to.b * cin + c) * d.height * d.width;
      const float* wf = sp.w + static_cast<int64_t>(o * cin + c) * kh * kw;
      for (int p = 0; p < kh; ++p) {
        const bool row_in = r + p >= 0 && r + p < d.height;
        for (int q = 0; q < kw; ++q) {
          const bool in = row_in && cc + q >= 0 && cc + q < d.width;
          const double xv = in ? xc[static_cast<int64_t>(r + p) * d.width + cc + q] : 0.0;
          acc += xv * wf[p * kw + q];
        }
      }
    }
    const float v = static_cast<float>(acc);
    ctx.SetPart(OutputAddr(k, g, i, j), g & 1, (g & 1) ? -v : v);
  });
  ctx.Sync("direct fallback");
}

// Padded shapes, after AddRemovedParts: an x tile whose mean CleanTransforms subtracted was
// transformed as if the mean stood at every element outside the image (the DC bin carries
// Th*Tw*mean, see StoreSpectrum), and with the removed parts added back output (i, j) of (o, m)
// is exactly
//     sum_c [ (x_c * w_oc)(i, j) + mean_cm * sum of W'_oc[p, q] over the taps (p, q) whose
//             x position (i + p - pad_top, j + q - pad_left) from the tile's origin is outside ]
// with W' the filter the FFT used (w less its removed taps, which AddRemovedParts added back
// against the true, zero-padded x). This subtracts that second term, summed in double from w
// over the outside taps only (what falls in the padding: none for an output whose window is
// inside the image, which then costs a few comparisons). Skips unresolved transforms (all their
// outputs are recomputed directly).
template <class Ctx>
CONV2D_HOST_DEVICE void PaddingMeanCorrection(Ctx& ctx, const KernelParams& k,
                                              const SparseInputs& sp, int n0) {
  const Dims& d = k.d;
  const int cin = d.in_channels, kh = d.kernel_h, kw = d.kernel_w;
  ForEachTileOutput(ctx, k, n0, [&](int g, int i, int j, int o, int m) {
    if (ctx.transform_stats()[g].unresolved) return;
    if (sp.lists.x_mean_tile[m] != sp.lists.epoch) return;  // no mean subtracted in this tile
    const fft_tiled::TileOrigin to = fft_tiled::OriginOf(d, m);
    const int r = to.row + i - k.pad_top, cc = to.col + j - k.pad_left;
    const int p_lo = r < 0 ? -r : 0, p_hi = d.height - r < kh ? d.height - r : kh;
    const int q_lo = cc < 0 ? -cc : 0, q_hi = d.width - cc < kw ? d.width - cc : kw;
    if (p_lo == 0 && p_hi == kh && q_lo == 0 && q_hi == kw) return;  // inside the image
    double acc = 0;
    for (int c = 0; c < cin; ++c) {
      const float mean = sp.lists.x_mean[m * cin + c];
      if (mean == 0.0f) continue;
      const int cw = sp.lists.w_count[o * cin + c];  // >= 0: else the transform is unresolved
      const Removed* lw = sp.lists.w_list + static_cast<int64_t>(o * cin + c) * kMaxRemovedW;
      const float* wf = sp.w + static_cast<int64_t>(o * cin + c) * kh * kw;
      double outside = 0;
      for (int p = 0; p < kh; ++p) {
        const bool row_inside = p >= p_lo && p < p_hi;
        for (int q = 0; q < kw; ++q) {
          if (row_inside && q >= q_lo && q < q_hi) {
            q = q_hi - 1;  // skip the inside columns
            continue;
          }
          bool removed = false;
          for (int e = 0; e < cw; ++e) removed = removed || (lw[e].u == p && lw[e].v == q);
          if (!removed) outside += wf[p * kw + q];
        }
      }
      acc += static_cast<double>(mean) * outside;
    }
    const float v = static_cast<float>(acc);
    if (v != 0.0f) ctx.AddData(OutputAddr(k, g, i, j), g & 1, (g & 1) ? v : -v);
  });
  ctx.Sync("padding means");
}

// Phase 0 of every kernel: the twiddle table and each transform's metadata (meta_of(g) for
// g < G).
template <class Ctx, class MetaFn>
CONV2D_HOST_DEVICE void Setup(Ctx& ctx, const KernelParams& k, MetaFn meta_of) {
  ctx.ForEach(kTwiddles + 2 * k.pairs, [&](int i) {
    if (i < kTwiddles) {
      ctx.SetTw(i, Twiddle128(i));
    } else {
      ctx.meta()[i - kTwiddles] = meta_of(i - kTwiddles);
      ZeroStat(ctx.transform_stats()[i - kTwiddles], /*keep_lists=*/false);
    }
  });
  ctx.Sync("setup");
}

// Loads rows [row0, row0 + rows) x columns [0, cols) of every pair from `src`: transform 2p's
// (u, v) in the real part, 2p+1's in the imaginary part, zero outside its meta extents (past
// the image, and in the padding). One item
// takes rows uq, uq + q, uq + 2q, uq + 3q (q = rows / 4, rows a power of two; fewer rows if
// rows < 4) of one column; the count is LoadItems(k, rows, cols). Lanes take consecutive
// columns. The copies go straight to shared memory (ctx.CopyIn, cp.async on the device), so
// every copy of the thread's items is in flight at once: with loads through registers each item
// waited for its own round trip before its stores (ncu, (256,32,128,1): 37% of the filter
// kernel's stall samples on those stores). The phase ends with ctx.WaitCopies() before its
// barrier.
CONV2D_HOST_DEVICE inline int LoadItems(const KernelParams& k, int rows, int cols) {
  return k.pairs * (rows >= 4 ? rows / 4 : 1) * cols;
}
template <class Ctx>
CONV2D_HOST_DEVICE void LoadRowsItem(Ctx& ctx, const KernelParams& k, const float* src, int row0,
                                     int rows, int cols, int it) {
  const int per = rows >= 4 ? 4 : rows;
  const int q = rows / per;
  int v, rest, uq, p;
  SplitIndex(it, cols, &v, &rest);
  SplitIndex(rest, q, &uq, &p);
  const TransformMeta a = ctx.meta()[2 * p], b = ctx.meta()[2 * p + 1];
  // One address per transform and column, then a 32-bit byte offset per load (u * pitch * 4,
  // unsigned: u, pitch >= 0), added as an integer so that the compiler keeps it to one wide
  // multiply-add per load instead of re-deriving a 64-bit sum of three terms.
  // (In integers, since with padding base + v may lie before x: only addresses inside are used.)
  const uintptr_t pa = reinterpret_cast<uintptr_t>(src) +
                       static_cast<uintptr_t>(static_cast<intptr_t>(a.base + v) * 4);
  const uintptr_t pb = reinterpret_cast<uintptr_t>(src) +
                       static_cast<uintptr_t>(static_cast<intptr_t>(b.base + v) * 4);
  const unsigned pitch_a = 4u * static_cast<unsigned>(a.pitch);
  const unsigned pitch_b = 4u * static_cast<unsigned>(b.pitch);
  const bool in_a = v >= a.col0 && v < a.cols, in_b = v >= b.col0 && v < b.cols;
  CONV2D_UNROLL
  for (int j = 0; j < 4; ++j) {
    if (j >= per) continue;
    const int u = row0 + uq + j * q;
    const bool ok_a = in_a && u >= a.row0 && u < a.rows, ok_b = in_b && u >= b.row0 && u < b.rows;
    // A masked copy reads nothing; it is still given an address inside the tensor.
    const float* re = ok_a ? reinterpret_cast<const float*>(pa + static_cast<unsigned>(u) * pitch_a)
                           : src;
    const float* im = ok_b ? reinterpret_cast<const float*>(pb + static_cast<unsigned>(u) * pitch_b)
                           : src;
    ctx.CopyIn(Addr(k.pair_stride, k.row_pitch, p, u, v), re, ok_a, im, ok_b);
  }
}

// Item `it` of a phase over (pair, frequency) with k0 < 2^log2_rows: lanes take consecutive
// pairs, then consecutive k1 < Tw/2 (runs aligned to the half-warps), then k0; the Nyquist
// column k1 = Tw/2 comes last.
struct FreqItem {
  int p, k0, k1;
};
CONV2D_HOST_DEVICE inline FreqItem FreqOf(const KernelParams& k, int log2_rows, int it) {
  const int body = k.pairs << (log2_rows + k.log2_tw - 1);
  FreqItem r;
  if (it < body) {
    r.p = it & (k.pairs - 1);
    const int rest = it >> k.log2_pairs;
    r.k1 = rest & ((1 << (k.log2_tw - 1)) - 1);
    r.k0 = rest >> (k.log2_tw - 1);
  } else {
    const int t = it - body;
    r.p = t & (k.pairs - 1);
    r.k0 = t >> k.log2_pairs;
    r.k1 = 1 << (k.log2_tw - 1);
  }
  return r;
}
CONV2D_HOST_DEVICE inline int FreqItems(const KernelParams& k, int log2_rows) {
  return k.pairs * (1 << log2_rows) * ((1 << (k.log2_tw - 1)) + 1);
}

// Separates each pair's spectrum Z into the two transforms' Hermitian halves and writes them
// frequency-major: out[f * n_total + n0 + g]. One item takes rows k0 = 4c + j (j < 4) of one
// column k1 of one pair (items ordered as FreqOf's over the chunks c, so the lanes of a half-warp
// read one row and write 16 consecutive runs of 2P transforms in every step j). Z[k0, k1] sits at
// bit-reversed row and column; bitrev(4c + j) = bitrev(4c) + (bitrev_2(j) << (log2 Th - 2)), and
// the mirror row -(4c + j) is 4(-c) for j = 0 and 4(-c - 1) + (4 - j) otherwise, so each item
// computes three bit reversals of rows instead of eight and steps its global address by a
// constant row of frequencies.
// scale multiplies every value (the filter's carries the inverse's 1/(Th Tw), so that no
// intermediate overflows while the output fits). The DC bin of a filter, and of an x tile whose
// mean CleanTransforms subtracted, is the transform's sum from its statistics (compensated,
// plus Th*Tw times that mean) instead of the butterflies', so that a large mean times a filter
// of nearly zero sum is carried with one rounding.
template <class Ctx>
CONV2D_HOST_DEVICE void StoreSpectrum(Ctx& ctx, const KernelParams& k, Cf* out, int n_total,
                                      int n0, float scale, bool filter) {
  const int lth = k.log2_th, th = 1 << lth, tw = 1 << k.log2_tw;
  const int half = tw / 2 + 1;
  const bool paired = n_total % 2 == 0;  // then n0 + 2p is even: 16-byte stores
  const int64_t row_step = static_cast<int64_t>(half) * n_total;  // from k0 to k0 + 1
  ctx.ForEach(FreqItems(k, lth - 2), [&](int it) {
    const FreqItem q = FreqOf(k, lth - 2, it);
    const int p = q.p, k1 = q.k1, k0 = 4 * q.k0;
    const int col = BitReverse(k1, k.log2_tw), mcol = BitReverse(-k1 & (tw - 1), k.log2_tw);
    const int row0 = BitReverse(k0, lth);
    const int mrow0 = BitReverse(-k0 & (th - 1), lth);
    const int mrow1 = BitReverse((-k0 - 4) & (th - 1), lth);
    const int n = n0 + 2 * p;
    Cf* dst = out + (static_cast<int64_t>(k0) * half + k1) * n_total + n;
CONV2D_UNROLL
    for (int j = 0; j < 4; ++j) {
      const int row = row0 + (BitReverseConst(j, 2) << (lth - 2));
      const int mrow = j == 0 ? mrow0 : mrow1 + (BitReverseConst(4 - j, 2) << (lth - 2));
      const Cf z = ctx.Ld(Addr(k.pair_stride, k.row_pitch, p, row, col));
      const Cf zm = ctx.Ld(Addr(k.pair_stride, k.row_pitch, p, mrow, mcol));
      Cf a = MakeCf(0.5f * scale * (z.x + zm.x), 0.5f * scale * (z.y - zm.y));
      Cf b = MakeCf(0.5f * scale * (z.y + zm.y), 0.5f * scale * (zm.x - z.x));
      if (k0 + j == 0 && k1 == 0) {
        const double area = static_cast<double>(th << k.log2_tw);
        const TransformStats& sa = ctx.transform_stats()[2 * p];
        const TransformStats& sb = ctx.transform_stats()[2 * p + 1];
        if (filter || sa.mean != 0) {
          a = MakeCf(static_cast<float>(scale * (sa.sum + area * sa.mean)), 0.0f);
        }
        if (filter || sb.mean != 0) {
          b = MakeCf(static_cast<float>(scale * (sb.sum + area * sb.mean)), 0.0f);
        }
      }
      Cf* d = dst + j * row_step;
      if (paired && n < n_total) {
        StoreGlobalPair(d, a, b);
      } else {
        if (n < n_total) d[0] = a;
        if (n + 1 < n_total) d[1] = b;
      }
    }
  });
}

// The filter kernel's CTA `cta`: transforms n = c*Cout + o in [n0, n0 + G).
template <class Ctx>
CONV2D_HOST_DEVICE void FilterCta(Ctx& ctx, const KernelParams& k, const float* w, Cf* spectrum,
                                  const SparseLists& lists, int cta) {
  // The call's epoch for the kernels after this one (SparseLists): one writer.
  if (cta == 0) ctx.ForEach(1, [&](int) { *lists.call_epoch = lists.epoch; });
  const int n0 = cta * 2 * k.pairs;
  const Dims& d = k.d;
  Setup(ctx, k, [&](int g) {
    const int n = n0 + g;
    if (n >= k.n_filter) return MakeMeta(0, d.kernel_w, 0, 0, 0, 0, 0, 0);
    const int c = n / d.out_channels, o = n - c * d.out_channels;
    return MakeMeta((o * d.in_channels + c) * d.kernel_h * d.kernel_w, d.kernel_w, 0, d.kernel_h,
                    0, d.kernel_w, d.kernel_h, d.kernel_w);
  });
  // The padded filter is zero in rows >= kernel_h and columns >= kernel_w. The row pass covers
  // rows < r2 = 2^ceil(log2 kernel_h) only (more zero rows stay zero). If kernel_w <= Tw/2 its
  // first stage never reads columns >= Tw/2; if r2 <= Th/2 the column pass's first stage never
  // reads rows >= Th/2. Everything else it reads is loaded here: rows < r2 up to column zw, the
  // zero rows [r2, zh) in full.
  const int th = 1 << k.log2_th, tw = 1 << k.log2_tw, r2 = 1 << k.filter_row_log2;
  const bool zero_right = 2 * d.kernel_w <= tw, zero_bottom = 2 * r2 <= th;
  const int zw = zero_right ? tw / 2 : tw, zh = zero_bottom ? th / 2 : th;
  const int top = LoadItems(k, r2, zw);
  ctx.ForEach(top + k.pairs * (zh - r2) * tw, [&](int it) {
    if (it < top) {
      LoadRowsItem(ctx, k, w, 0, r2, zw, it);
    } else {
      int u, p;
      const int v = (it - top) & (tw - 1);
      SplitIndex((it - top) >> k.log2_tw, zh - r2, &u, &p);
      ctx.St(Addr(k.pair_stride, k.row_pitch, p, r2 + u, v), MakeCf(0.0f, 0.0f));
    }
  });
  ctx.WaitCopies();
  ctx.Sync("load");
  {
    const int cout = d.out_channels, cin = d.in_channels;
    auto slot = [&](int g) -> int64_t {  // filter (o, c) at o*Cin + c, or -1 past the end
      const int n = n0 + g;
      if (n >= k.n_filter) return -1;
      const int c = n / cout, o = n - c * cout;
      return static_cast<int64_t>(o) * cin + c;
    };
    // The cleaning's region: the taps' rows and the columns below the next power of two of
    // kernel_w (the rest of the tile is zero: half of what the row pass reads when kernel_w is
    // a power of two).
    const int log2_taps_w = CeilLog2(d.kernel_w) < k.log2_tw ? CeilLog2(d.kernel_w) : k.log2_tw;
    auto counts = [&](int g) -> int* {
      const int64_t s = slot(g);
      return s < 0 ? nullptr : lists.w_count + s;
    };
    if (!NeedsCleaning(ctx, k, r2, log2_taps_w, /*subtract_mean=*/false)) {
      PublishCounts(ctx, k, /*any=*/false, kMaxRemovedW, lists, counts);
      if (zero_right) {
        RowFft<true>(ctx, k, k.pair_stride, r2);
      } else {
        RowFft<false>(ctx, k, k.pair_stride, r2);
      }
      if (zero_bottom) {
        ColumnFft<false, true>(ctx, k, k.pair_stride, tw);
      } else {
        ColumnFft<false, false>(ctx, k, k.pair_stride, tw);
      }
      StoreSpectrum(ctx, k, spectrum, k.n_filter, n0, k.scale, /*filter=*/true);
      return;
    }
    const bool any = CleanTransforms(ctx, k, r2, log2_taps_w, /*subtract_mean=*/false,
                                     kMaxRemovedW, [&](int g) -> Removed* {
                                       const int64_t s = slot(g);
                                       return s < 0 ? nullptr : lists.w_list + s * kMaxRemovedW;
                                     });
    PublishCounts(ctx, k, any, kMaxRemovedW, lists, counts);
    // Rare: the unpruned passes, one copy of them, over zeros where the load left the pruned
    // parts unwritten (columns >= zw of the taps' rows, rows >= zh).
    ctx.ForEach(k.pairs * th * tw, [&](int it) {
      const int v = it & (tw - 1), u = (it >> k.log2_tw) & (th - 1);
      const int p = it >> (k.log2_tw + k.log2_th);
      if ((u < r2 && v >= zw) || u >= zh) {
        ctx.St(Addr(k.pair_stride, k.row_pitch, p, u, v), MakeCf(0.0f, 0.0f));
      }
    });
    ctx.Sync("zero the pruned parts");
    RowFft<false>(ctx, k, k.pair_stride, r2);
    ColumnFft<false, false>(ctx, k, k.pair_stride, tw);
    StoreSpectrum(ctx, k, spectrum, k.n_filter, n0, k.scale, /*filter=*/true);
  }
}

// The input kernel's CTA `cta`: transforms n = c*M + m in [n0, n0 + G).
template <class Ctx>
CONV2D_HOST_DEVICE void InputCta(Ctx& ctx, const KernelParams& k, const float* x, Cf* spectrum,
                                 const SparseLists& lists, int cta) {
  const int n0 = cta * 2 * k.pairs;
  const Dims& d = k.d;
  const int th = 1 << k.log2_th, tw = 1 << k.log2_tw;
  Setup(ctx, k, [&](int g) {
    const int n = n0 + g;
    if (n >= k.n_input) return MakeMeta(0, d.width, 0, 0, 0, 0, 0, 0);
    const int c = n / d.tiles, m = n - c * d.tiles;
    const fft_tiled::TileOrigin o = fft_tiled::OriginOf(d, m);
    // The tile's origin in the image: the origin in the padded image less the padding (ChooseConfig
    // checked that every such offset, and the tile's extent past it, fits in int).
    const int r0 = o.row - k.pad_top, c0 = o.col - k.pad_left;
    return MakeMeta(((o.b * d.in_channels + c) * d.height + r0) * d.width + c0, d.width, -r0,
                    d.height - r0, -c0, d.width - c0, th, tw);
  });
  ctx.ForEach(LoadItems(k, th, tw), [&](int it) { LoadRowsItem(ctx, k, x, 0, th, tw, it); });
  ctx.WaitCopies();
  ctx.Sync("load");
  {
    const int cin = d.in_channels;
    auto slot = [&](int g) -> int64_t {  // x transform (c, m) at m*Cin + c, or -1 past the end
      const int n = n0 + g;
      if (n >= k.n_input) return -1;
      const int c = n / d.tiles, m = n - c * d.tiles;
      return static_cast<int64_t>(m) * cin + c;
    };
    auto transform = [&] {
      RowFft<false>(ctx, k, k.pair_stride, 1 << k.log2_th);
      ColumnFft<false, false>(ctx, k, k.pair_stride, 1 << k.log2_tw);
      StoreSpectrum(ctx, k, spectrum, k.n_input, n0, 1.0f, /*filter=*/false);
    };
    auto counts = [&](int g) -> int* {
      const int64_t s = slot(g);
      return s < 0 ? nullptr : lists.x_count + s;
    };
    auto means = [&](int g) -> float* {  // padded shapes only
      const int64_t s = slot(g);
      return s < 0 || lists.x_mean == nullptr ? nullptr : lists.x_mean + s;
    };
    // Published last, with the call's epoch, which the filter kernel stores: after waiting for
    // that kernel (on the device it runs alongside this one until here; the transforms leave
    // the statistics PublishCounts reads as they were).
    auto publish = [&](bool any) {
      ctx.WaitForPriorKernel();
      SparseLists with_epoch = lists;
      with_epoch.epoch = *lists.call_epoch;
      PublishCounts(ctx, k, any, kMaxRemovedX, with_epoch, counts, means);
    };
    if (!NeedsCleaning(ctx, k, th, k.log2_tw, /*subtract_mean=*/true)) {
      transform();
      publish(false);
      return;
    }
    const bool any = CleanTransforms(ctx, k, th, k.log2_tw, /*subtract_mean=*/true,
                                     kMaxRemovedX, [&](int g) -> Removed* {
                                       const int64_t s = slot(g);
                                       return s < 0 ? nullptr : lists.x_list + s * kMaxRemovedX;
                                     });
    transform();
    publish(any);
  }
}

// The inverse kernel's CTA `cta`: transforms n = o*M + m in [n0, n0 + G).
template <class Ctx>
CONV2D_HOST_DEVICE void InverseCta(Ctx& ctx, const KernelParams& k, const Cf* spectrum, float* y,
                                   const SparseInputs& sparse_in, int cta) {
  const int n0 = cta * 2 * k.pairs;
  const Dims& d = k.d;
  const int th = 1 << k.log2_th, tw = 1 << k.log2_tw;
  const int half = tw / 2 + 1;
  const int n_total = k.n_output;
  // The call's epoch, which the filter kernel stored (the kernels before this one are done).
  SparseInputs sparse = sparse_in;
  sparse.lists.epoch = *sparse_in.lists.call_epoch;
  // Read first, used after the transforms: whether anything was left out of them this call.
  const bool removed_any = *sparse.lists.flag == sparse.lists.epoch;
  Setup(ctx, k, [&](int g) {
    const int n = n0 + g;
    if (n >= n_total) return MakeMeta(0, d.out_w, 0, 0, 0, 0, 0, 0);
    const int o = n / d.tiles, m = n - o * d.tiles;
    const fft_tiled::TileOrigin to = fft_tiled::OriginOf(d, m);
    return MakeMeta(((to.b * d.out_channels + o) * d.out_h + to.row) * d.out_w + to.col, d.out_w,
                    0, d.out_h - to.row, 0, d.out_w - to.col, d.step_h, d.step_w);
  });

  // Z = conj(A + iB) in natural order over the full Th x Tw, from the Hermitian halves.
  const bool paired = n_total % 2 == 0;
  auto read = [&](int f, int n, Cf* a, Cf* b) {
    const Cf* src = spectrum + static_cast<int64_t>(f) * n_total + n;
    if (paired && n < n_total) {
      LoadGlobalPair(src, a, b);
    } else {
      *a = n < n_total ? LoadGlobalCf(src) : MakeCf(0.0f, 0.0f);
      *b = n + 1 < n_total ? LoadGlobalCf(src + 1) : MakeCf(0.0f, 0.0f);
    }
  };
  // One item takes rows k0 and k0 + Th/2 of one column k1: its loads are in flight together.
  ctx.ForEach(FreqItems(k, k.log2_th - 1), [&](int it) {
    const FreqItem q = FreqOf(k, k.log2_th - 1, it);
    const int p = q.p, k1 = q.k1;
    const int n = n0 + 2 * p;
    const bool own_mirror = k1 == 0 || k1 == tw / 2;
    Cf a[2], b[2], am[2], bm[2];
    CONV2D_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int k0 = q.k0 + h * th / 2;
      read(k0 * half + k1, n, &a[h], &b[h]);
      if (own_mirror) read((-k0 & (th - 1)) * half + k1, n, &am[h], &bm[h]);
    }
    CONV2D_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int k0 = q.k0 + h * th / 2;
      Cf ah = a[h], bh = b[h];
      if (own_mirror) {
        // Columns that are their own mirror: keep the Hermitian part, (A[k] + conj A[-k]) / 2.
        ah = MakeCf(0.5f * (a[h].x + am[h].x), 0.5f * (a[h].y - am[h].y));
        bh = MakeCf(0.5f * (b[h].x + bm[h].x), 0.5f * (b[h].y - bm[h].y));
      }
      ctx.St(Addr(k.pair_stride, k.row_pitch, p, k0, k1), MakeCf(ah.x - bh.y, -(ah.y + bh.x)));
      if (!own_mirror) {
        // Z[-k0, Tw-k1] = conj A + i conj B; stored conjugated.
        ctx.St(Addr(k.pair_stride, k.row_pitch, p, -k0 & (th - 1), tw - k1),
               MakeCf(ah.x + bh.y, ah.y - bh.x));
      }
    }
  });
  ctx.Sync("load spectrum");

  RowFft<false>(ctx, k, k.pair_stride, th);
  // Only the columns holding outputs j < step_w; they sit at bit-reversed positions.
  ColumnFft<true, false>(ctx, k, k.pair_stride, d.step_w);
  if (removed_any) {
    ctx.ForEach(2 * k.pairs, [&](int g) { ctx.transform_stats()[g].unresolved = 0; });
    ctx.Sync("clear flags");
    const bool unresolved = AddRemovedParts(ctx, k, sparse, n0);
    if (k.padded) PaddingMeanCorrection(ctx, k, sparse, n0);
    if (unresolved) DirectFallback(ctx, k, sparse, n0);
  }

  // D = DFT(conj Z); the outputs are conj(D) (the filter spectrum carried 1 / (Th Tw)):
  // transform 2p's is Re D, 2p+1's -Im D.
  // One item takes rows i = 4c + r (r < 4) of one column j of one transform g; lanes take
  // consecutive j, then c, then g (two multiplicative divisions per item, none per element).
  // bitrev(4c + r) = bitrev(4c) + (bitrev_2(r) << (log2 Th - 2)); 4 ceil(step_h / 4) <= Th.
  const int chunks = (d.step_h + 3) / 4;
  ctx.ForEach(2 * k.pairs * chunks * d.step_w, [&](int it) {
    int j, rest, g, c;
    k.div_step_w.DivMod(it, &rest, &j);
    k.div_out_chunks.DivMod(rest, &g, &c);
    const TransformMeta t = ctx.meta()[g];
    const int col = BitReverse(j, k.log2_tw);
    const int row0 = BitReverse(4 * c, k.log2_th);
CONV2D_UNROLL
    for (int r = 0; r < 4; ++r) {
      const int i = 4 * c + r;
      if (i < t.rows && j < t.cols) {
        const Cf z = ctx.Ld(Addr(k.pair_stride, k.row_pitch, g >> 1,
                                 row0 + (BitReverseConst(r, 2) << (k.log2_th - 2)), col));
        y[t.base + i * t.pitch + j] = g & 1 ? -z.y : z.x;
      }
    }
  });
}

}  // namespace fft_fused
}  // namespace conv2d

#endif  // CONV2D_CONV_FFT_FUSED_INTERNAL_H_
