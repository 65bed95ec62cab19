// "direct_tiled": tiled shared-memory direct convolution on CUDA cores (see direct_tiled.h).
//
// Work split. A block of 256 threads owns tile_h x tile_w output pixels of one image for
// block_channels output channels. Thread t is pixel group t % G and channel group t / G
// (G = 256 / channel groups); it computes 4 outputs in one column, kRowStep rows apart, for 8
// consecutive output channels: 32 fp32 accumulators in registers for the current stage, 32 fp64
// ones in shared memory for the whole sum.
// A warp's 32 lanes are consecutive pixel groups, i.e. whole rows of the tile, so that the input
// reads of one instruction hit distinct banks (the staged row stride is padded to make sure), and
// (but for the 8x8 configuration) one channel group, so that the filter reads are broadcasts.
//
// Stages. The reduction over (c, p, q) is cut into stages that fit the shared-memory budget:
// several whole input channels, or one channel and a chunk of kernel rows, or one channel, one
// row and a chunk of columns. Within a stage the filter terms of one output channel are a
// contiguous run of the OIHW filter, so the loader reads runs. Each stage is summed in fp32 and
// added to the fp64 accumulators: at most kMaxTermsPerFold fp32 terms, then one fp64 add per
// output, which keeps the K=32, C=128 case (131072 terms) well inside the accuracy bar and costs
// a few percent.
//
// Indices. Global offsets are 64-bit; tile-local and shared-memory ones 32-bit, which the
// planner guarantees by bounding every dimension by 2^30 and the grid by 2^31-1 blocks.
//
// The per-thread phases (load a stage, compute a stage, fold, store) are host+device, so
// that SimulateOnHost runs the very same index arithmetic on the CPU with bounds checks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "conv/arch/host_device.h"
#include "conv/arch/int_math.h"
#include "conv/core/cuda_status.h"
#include "conv/algorithms/direct/direct_tiled.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace direct_tiled_internal {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPix = 4;  // output pixels per thread (one column, kRowStep rows apart)
constexpr int kCh = 8;   // output channels per thread (consecutive)
// fp32 terms summed before folding into fp64. With inputs in [-1, 1] a stage's partial sum of up
// to 1024 products is ~10 in size and its fp32 rounding error a random walk of order
// sqrt(1024) * 2^-24 * 10 ~ 2e-5; hundreds of stages summed in fp64 stay far below the 1e-3 bar.
// The fold costs one convert and one fp64 add per output per stage.
constexpr int kMaxTermsPerFold = 1024;
constexpr int64_t kMaxDim = int64_t{1} << 30;

template <int kTileW_, int kGroups_>
struct Config {
  static constexpr int kTileW = kTileW_;
  static constexpr int kGroups = kGroups_;  // channel groups per block
  static constexpr int kPixelGroups = kThreads / kGroups;
  static constexpr int kRowStep = kPixelGroups / kTileW;  // rows between a thread's outputs
  static constexpr int kTileH = kPix * kRowStep;
  static constexpr int kBlockCh = kCh * kGroups;
  // Filter slice layout [term][channel], rows padded by 4 floats: the loader's lanes (8 terms x 4
  // channels) then write 32 distinct banks, and float4 reads stay 16-byte aligned.
  static constexpr int kWStride = kBlockCh + 4;
  static_assert(kPixelGroups % kTileW == 0, "pixel groups must fill whole tile rows");
  static_assert(kRowStep >= 1, "tile narrower than the pixel groups");
  static_assert((kBlockCh / 4 & (kBlockCh / 4 - 1)) == 0, "channel quads must be a power of 2");
};

// The compiled configurations; the planner picks per shape by modelled time (mostly: how little of
// the padded tile grid is wasted, and how well the blocks fill the last wave; see ModelCycles).
using Config16x16x32 = Config<16, 4>;  // the default: 16x16 pixels x 32 channels
using Config16x32x16 = Config<32, 2>;  // 16x32 pixels x 16 channels
using Config32x32x8 = Config<32, 1>;   // 32x32 pixels x 8 channels, for few output channels
using Config8x8x128 = Config<8, 16>;   // 8x8 pixels x 128 channels, for small images

struct ConfigDims {
  int tile_h, tile_w, block_channels, w_stride;
};

template <class C>
constexpr ConfigDims DimsOf() {
  return {C::kTileH, C::kTileW, C::kBlockCh, C::kWStride};
}

constexpr ConfigDims kConfigs[] = {DimsOf<Config16x16x32>(), DimsOf<Config16x32x16>(),
                                   DimsOf<Config32x32x8>(), DimsOf<Config8x8x128>()};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);

// Everything the kernel needs; passed by value (kernel parameters live in constant memory).
struct Params {
  const float* x;
  const float* w;
  float* y;
  int batch, cin, cout, h, w_, kh, kw, oh, ow;
  int chan_chunk, row_chunk, col_chunk, in_stride;
  int w_floats;
  int tiles_h, tiles_w, channel_blocks;
  // Only the host simulation reads these (bounds checks).
  int64_t stage_floats, x_elems, w_elems, y_elems;
};

// Bounds checks of the host simulation; nothing on the device.
int64_t g_sim_violations = 0;
// Loop unrolling is for the device pass (CONV2D_UNROLL, conv/arch/host_device.h). The
// kernel-column loop: 4 copies let loads run ahead of the FMAs. Unmeasured; 8 also compiles to
// 128 registers without spills, a knob to try on the H200.
#ifdef __CUDA_ARCH__
#define CONV2D_UNROLL_Q _Pragma("unroll 4")
#else
#define CONV2D_UNROLL_Q
#endif

// On the host: counts a failed check and says whether the access may go ahead (so that a bug
// shows as a test failure, not as heap corruption). On the device: always true, compiled away.
CONV2D_HOST_DEVICE_INLINE bool SimCheck(bool ok) {
#ifndef __CUDA_ARCH__
  if (!ok) ++g_sim_violations;
  return ok;
#else
  return true;
#endif
}

// Inputs are read-only for the kernel's lifetime: the non-coherent path on the device.
CONV2D_HOST_DEVICE_INLINE float LoadInput(const float* ptr) {
#ifdef __CUDA_ARCH__
  return __ldg(ptr);
#else
  return *ptr;
#endif
}

struct BlockCoords {
  int b, o0, oy0, ox0;  // image, first output channel, first output row and column of the tile
};

struct ThreadCoords {
  int cg, ly0, lx;  // channel group; first row and the column of the thread's outputs in the tile
};

struct Stage {
  int c0, p0, q0;        // first input channel, kernel row and kernel column
  int cc_n, kr_n, kc_n;  // how many of each
};

template <class C>
CONV2D_HOST_DEVICE_INLINE BlockCoords BlockOf(const Params& p, unsigned block) {
  BlockCoords bc;
  bc.o0 = static_cast<int>(block % p.channel_blocks) * C::kBlockCh;
  block /= p.channel_blocks;
  bc.ox0 = static_cast<int>(block % p.tiles_w) * C::kTileW;
  block /= p.tiles_w;
  bc.oy0 = static_cast<int>(block % p.tiles_h) * C::kTileH;
  bc.b = static_cast<int>(block / p.tiles_h);
  return bc;
}

template <class C>
CONV2D_HOST_DEVICE_INLINE ThreadCoords ThreadOf(int tid) {
  ThreadCoords tc;
  const int pg = tid % C::kPixelGroups;
  tc.cg = tid / C::kPixelGroups;
  tc.lx = pg % C::kTileW;
  tc.ly0 = pg / C::kTileW;
  return tc;
}

CONV2D_HOST_DEVICE_INLINE int IMin(int a, int b) { return a < b ? a : b; }

CONV2D_HOST_DEVICE_INLINE Stage MakeStage(const Params& p, int c0, int p0, int q0) {
  Stage st;
  st.c0 = c0;
  st.p0 = p0;
  st.q0 = q0;
  st.cc_n = IMin(p.chan_chunk, p.cin - c0);
  st.kr_n = IMin(p.row_chunk, p.kh - p0);
  st.kc_n = IMin(p.col_chunk, p.kw - q0);
  return st;
}

// Global loads in flight per thread while staging: each batch issues all its loads before its
// first shared store, so a stage costs a few memory latencies, not one per element.
constexpr int kLoadBatch = 8;

// Thread `tid`'s share of staging one stage: the filter slice [term][channel] at s_w, the input
// tile [channel][row][col] (rows of in_stride floats) at s_in. Pixels outside the image read as 0;
// only outputs outside the image ever use them.
template <class C>
CONV2D_HOST_DEVICE_INLINE void LoadStage(const Params& p, int tid, const BlockCoords& bc,
                                                   const Stage& st, float* s_w, float* s_in) {
  // Filter: for output channel o the stage's terms are w[base(o) + t], t < T (the planner's
  // chunking guarantees contiguity), stored at s_w[t * kWStride + m]. A warp takes 8 consecutive
  // terms of 4 consecutive channels per unit: 32-byte global runs, 32 distinct banks.
  {
    constexpr int kQuads = C::kBlockCh / 4;
    const int T = st.cc_n * st.kr_n * st.kc_n;
    const int units = ((T + 7) >> 3) * kQuads;
    const int warp = tid >> 5, lane = tid & 31;
    const int64_t khw = static_cast<int64_t>(p.kh) * p.kw;
    const int64_t stage_off =
        static_cast<int64_t>(st.c0) * khw + static_cast<int64_t>(st.p0) * p.kw + st.q0;
    for (int u0 = warp; u0 < units; u0 += kLoadBatch * kWarps) {
      float v[kLoadBatch];
      int si[kLoadBatch];
      CONV2D_UNROLL
      for (int k = 0; k < kLoadBatch; ++k) {
        const int u = u0 + k * kWarps;
        const int t = (u / kQuads) * 8 + (lane & 7);
        const int m = (u % kQuads) * 4 + (lane >> 3);
        const int o = bc.o0 + m;
        si[k] = -1;
        v[k] = 0.f;
        if (u < units && t < T) {
          si[k] = t * C::kWStride + m;
          if (o < p.cout) {
            const int64_t gi = static_cast<int64_t>(o) * p.cin * khw + stage_off + t;
            if (SimCheck(gi >= 0 && gi < p.w_elems)) v[k] = LoadInput(p.w + gi);
          }
        }
      }
      CONV2D_UNROLL
      for (int k = 0; k < kLoadBatch; ++k) {
        if (si[k] >= 0) {
          if (SimCheck(si[k] < p.w_floats)) s_w[si[k]] = v[k];
        }
      }
    }
  }
  // Input: rows of IC floats, lpr lanes per row (so that narrow rows still use whole warps). The
  // thread walks its (channel, row, column) items in order: column my_col + j * lpr of rows
  // my_row + i * rows_per_pass, counting rows across channels.
  {
    const int IR = C::kTileH + st.kr_n - 1;
    const int IC = C::kTileW + st.kc_n - 1;
    const int lpr_log2 = IC > 16 ? 5 : (IC > 8 ? 4 : 3);
    const int lpr = 1 << lpr_log2;
    const int rows_per_pass = kThreads >> lpr_log2;
    const int my_row = tid >> lpr_log2, my_col = tid & (lpr - 1);
    const int gy0 = bc.oy0 + st.p0, gx0 = bc.ox0 + st.q0;
    const int64_t plane_elems = static_cast<int64_t>(p.h) * p.w_;
    const int64_t plane0 = (static_cast<int64_t>(bc.b) * p.cin + st.c0) * plane_elems;
    const int64_t s_in_floats = p.stage_floats - p.w_floats;
    if (my_col < IC) {
      int cc = 0, r = my_row, col = my_col;
      while (r >= IR) {
        r -= IR;
        ++cc;
      }
      while (cc < st.cc_n) {
        float v[kLoadBatch];
        int di[kLoadBatch];
        CONV2D_UNROLL
        for (int k = 0; k < kLoadBatch; ++k) {
          di[k] = -1;
          v[k] = 0.f;
          if (cc < st.cc_n) {
            const int gy = gy0 + r, gx = gx0 + col;
            di[k] = (cc * IR + r) * p.in_stride + col;
            if (gy < p.h && gx < p.w_) {
              const int64_t gi = plane0 + cc * plane_elems + static_cast<int64_t>(gy) * p.w_ + gx;
              if (SimCheck(gi >= 0 && gi < p.x_elems)) v[k] = LoadInput(p.x + gi);
            }
            col += lpr;
            if (col >= IC) {
              col = my_col;
              r += rows_per_pass;
              while (r >= IR) {
                r -= IR;
                ++cc;
              }
            }
          }
        }
        CONV2D_UNROLL
        for (int k = 0; k < kLoadBatch; ++k) {
          if (di[k] >= 0) {
            if (SimCheck(di[k] < s_in_floats)) s_in[di[k]] = v[k];
          }
        }
      }
    }
  }
}

// One stage's products for this thread's 4 pixels x 8 channels, in fp32.
//   acc[r][m] += sum_{cc,pp,q} in[cc][ly0 + r*kRowStep + pp][lx + q] * w[(cc,pp,q)][cg*8 + m]
template <class C>
CONV2D_HOST_DEVICE_INLINE void ComputeStage(const Params& p, const ThreadCoords& tc,
                                                      const Stage& st, const float* s_w,
                                                      const float* s_in, float (&acc)[kPix][kCh]) {
  const int S = p.in_stride;
  const int IR = C::kTileH + st.kr_n - 1;
  const int row_step = C::kRowStep * S;
#ifndef __CUDA_ARCH__
  const int64_t s_in_floats = p.stage_floats - p.w_floats;
#endif
  for (int cc = 0; cc < st.cc_n; ++cc) {
    for (int pp = 0; pp < st.kr_n; ++pp) {
      const int xi = (cc * IR + tc.ly0 + pp) * S + tc.lx;
      const int wi = (cc * st.kr_n + pp) * st.kc_n * C::kWStride + tc.cg * kCh;
      CONV2D_UNROLL_Q
      for (int q = 0; q < st.kc_n; ++q) {
        const int wq = wi + q * C::kWStride;
#ifndef __CUDA_ARCH__
        if (!SimCheck(wq >= 0 && wq + kCh <= p.w_floats && wq % 4 == 0)) continue;
#endif
        const float4 wa = *reinterpret_cast<const float4*>(s_w + wq);
        const float4 wb = *reinterpret_cast<const float4*>(s_w + wq + 4);
        const float wk[kCh] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
        CONV2D_UNROLL
        for (int r = 0; r < kPix; ++r) {
#ifndef __CUDA_ARCH__
          // Within the staged rows and columns, not the padding or the next channel's rows.
          SimCheck(tc.ly0 + r * C::kRowStep + pp < IR);
          SimCheck(tc.lx + q < C::kTileW + st.kc_n - 1);
          if (!SimCheck(xi + r * row_step + q >= 0 && xi + r * row_step + q < s_in_floats)) {
            continue;
          }
#endif
          const float xv = s_in[xi + r * row_step + q];
          CONV2D_UNROLL
          for (int m = 0; m < kCh; ++m) acc[r][m] = fmaf(xv, wk[m], acc[r][m]);
        }
      }
    }
  }
}

// The fp64 accumulators live in shared memory, s_acc[(r * kCh + m) * kThreads + tid]: in
// registers they would push the kernel past 128 registers (two blocks per SM) and spill. Each
// thread touches only its own slots, so no barrier is needed; a warp's accesses are 32
// consecutive doubles, free of bank conflicts.
constexpr int kAccDoubles = kPix * kCh * kThreads;

CONV2D_HOST_DEVICE_INLINE void Fold(int tid, const float (&acc)[kPix][kCh],
                                              double* s_acc) {
  CONV2D_UNROLL
  for (int r = 0; r < kPix; ++r) {
    CONV2D_UNROLL
    for (int m = 0; m < kCh; ++m) {
      s_acc[(r * kCh + m) * kThreads + tid] += static_cast<double>(acc[r][m]);
    }
  }
}

template <class C>
CONV2D_HOST_DEVICE_INLINE void StoreOutputs(const Params& p, const BlockCoords& bc,
                                                      int tid, const ThreadCoords& tc,
                                                      const double* s_acc) {
  const int ox = bc.ox0 + tc.lx;
  if (ox >= p.ow) return;
  CONV2D_UNROLL
  for (int r = 0; r < kPix; ++r) {
    const int oy = bc.oy0 + tc.ly0 + r * C::kRowStep;
    if (oy >= p.oh) continue;
    CONV2D_UNROLL
    for (int m = 0; m < kCh; ++m) {
      const int o = bc.o0 + tc.cg * kCh + m;
      if (o < p.cout) {
        const int64_t yi = ((static_cast<int64_t>(bc.b) * p.cout + o) * p.oh + oy) * p.ow + ox;
        if (SimCheck(yi >= 0 && yi < p.y_elems)) {
          p.y[yi] = static_cast<float>(s_acc[(r * kCh + m) * kThreads + tid]);
        }
      }
    }
  }
}

template <class C>
__global__ void __launch_bounds__(kThreads, 2) DirectTiledKernel(const Params p) {
  // [fp64 accumulators][filter slice][input tile]; float4 so that the filter slice, at a
  // 64 KiB offset, can be read as float4.
  extern __shared__ float4 smem_raw[];
  double* s_acc = reinterpret_cast<double*>(smem_raw);
  float* s_w = reinterpret_cast<float*>(s_acc + kAccDoubles);
  float* s_in = s_w + p.w_floats;
  const int tid = threadIdx.x;
  const BlockCoords bc = BlockOf<C>(p, blockIdx.x);
  const ThreadCoords tc = ThreadOf<C>(tid);
  for (int k = 0; k < kPix * kCh; ++k) s_acc[k * kThreads + tid] = 0.0;
  for (int c0 = 0; c0 < p.cin; c0 += p.chan_chunk) {
    for (int p0 = 0; p0 < p.kh; p0 += p.row_chunk) {
      for (int q0 = 0; q0 < p.kw; q0 += p.col_chunk) {
        const Stage st = MakeStage(p, c0, p0, q0);
        __syncthreads();  // the previous stage's reads are done before we overwrite
        LoadStage<C>(p, tid, bc, st, s_w, s_in);
        __syncthreads();
        float acc[kPix][kCh];
        CONV2D_UNROLL
        for (int r = 0; r < kPix; ++r) {
          CONV2D_UNROLL
          for (int m = 0; m < kCh; ++m) acc[r][m] = 0.f;
        }
        ComputeStage<C>(p, tc, st, s_w, s_in, acc);
        Fold(tid, acc, s_acc);
      }
    }
  }
  StoreOutputs<C>(p, bc, tid, tc, s_acc);
}

// The kernel's block loop, one thread after another per phase, on the CPU.
template <class C>
absl::Status SimulateConfig(const Params& p, int64_t blocks) {
  std::vector<float4> smem4(kAccDoubles / 2 + (p.stage_floats + 3) / 4);
  double* s_acc = reinterpret_cast<double*>(smem4.data());
  float* s_w = reinterpret_cast<float*>(s_acc + kAccDoubles);
  float* s_in = s_w + p.w_floats;
  auto acc = std::make_unique<float[][kPix][kCh]>(kThreads);
  g_sim_violations = 0;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const BlockCoords bc = BlockOf<C>(p, static_cast<unsigned>(blk));
    // Garbage from the previous block must not survive the kernel's zeroing.
    std::fill(s_acc, s_acc + kAccDoubles, std::numeric_limits<double>::quiet_NaN());
    for (int t = 0; t < kThreads; ++t) {
      for (int k = 0; k < kPix * kCh; ++k) s_acc[k * kThreads + t] = 0.0;
    }
    for (int c0 = 0; c0 < p.cin; c0 += p.chan_chunk) {
      for (int p0 = 0; p0 < p.kh; p0 += p.row_chunk) {
        for (int q0 = 0; q0 < p.kw; q0 += p.col_chunk) {
          const Stage st = MakeStage(p, c0, p0, q0);
          std::fill(s_w, s_w + p.stage_floats, std::numeric_limits<float>::quiet_NaN());
          for (int t = 0; t < kThreads; ++t) LoadStage<C>(p, t, bc, st, s_w, s_in);
          for (int t = 0; t < kThreads; ++t) {
            for (int r = 0; r < kPix; ++r) {
              for (int m = 0; m < kCh; ++m) acc[t][r][m] = 0.f;
            }
            ComputeStage<C>(p, ThreadOf<C>(t), st, s_w, s_in, acc[t]);
            Fold(t, acc[t], s_acc);
          }
        }
      }
    }
    for (int t = 0; t < kThreads; ++t) StoreOutputs<C>(p, bc, t, ThreadOf<C>(t), s_acc);
  }
  if (g_sim_violations != 0) {
    return absl::InternalError(
        absl::StrCat("direct_tiled simulation: ", g_sim_violations, " out-of-bounds accesses"));
  }
  return absl::OkStatus();
}

Params MakeParams(const Shape& s, const Tiling& t, const float* x, const float* w, float* y) {
  Params p;
  p.x = x;
  p.w = w;
  p.y = y;
  p.batch = static_cast<int>(s.batch);
  p.cin = static_cast<int>(s.in_channels);
  p.cout = static_cast<int>(s.out_channels);
  p.h = static_cast<int>(s.height);
  p.w_ = static_cast<int>(s.width);
  p.kh = static_cast<int>(s.kernel_h);
  p.kw = static_cast<int>(s.kernel_w);
  p.oh = static_cast<int>(s.out_h());
  p.ow = static_cast<int>(s.out_w());
  p.chan_chunk = t.chan_chunk;
  p.row_chunk = t.row_chunk;
  p.col_chunk = t.col_chunk;
  p.in_stride = t.in_stride;
  p.w_floats = static_cast<int>(t.w_floats);
  p.tiles_h = static_cast<int>(t.tiles_h);
  p.tiles_w = static_cast<int>(t.tiles_w);
  p.channel_blocks = static_cast<int>(t.channel_blocks);
  p.stage_floats = t.stage_bytes / 4;
  p.x_elems = s.input_elements();
  p.w_elems = s.filter_elements();
  p.y_elems = s.output_elements();
  return p;
}

// Once per plan, on the device current at plan creation: more than the default 48 KiB of dynamic
// shared memory, and the carveout that lets two such blocks share an SM. The limit is a property
// of the kernel, not of the plan, so it is set to the most any default-budget plan uses: a later
// plan with a smaller stage must not lower it under an earlier one's feet.
template <class C>
absl::Status PrepareConfig(const Tiling& t) {
  const int64_t limit =
      std::max<int64_t>(t.smem_bytes, 8 * int64_t{kAccDoubles} + kDefaultSmemBudgetBytes);
  RETURN_IF_ERROR(CudaStatus(
      cudaFuncSetAttribute(DirectTiledKernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(limit)),
      "direct_tiled: raising the shared-memory limit"));
  return CudaStatus(
      cudaFuncSetAttribute(DirectTiledKernel<C>, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared),
      "direct_tiled: shared-memory carveout");
}

template <class C>
absl::Status LaunchConfig(const Params& p, const Tiling& t, cudaStream_t stream) {
  DirectTiledKernel<C>
      <<<static_cast<unsigned>(t.blocks), kThreads, static_cast<size_t>(t.smem_bytes), stream>>>(p);
  return LaunchStatus("direct_tiled kernel launch");
}

// Staged input row stride: at least the row, and congruent to the tile width mod 32 when a warp
// spans several tile rows, so that those rows fall in disjoint banks.
int64_t InStride(const ConfigDims& d, int64_t col_chunk) {
  const int64_t ic = d.tile_w + col_chunk - 1;
  if (d.tile_w >= 32) return ic;
  return ic + ((d.tile_w - ic % 32) % 32 + 32) % 32;
}

// Shared floats for one stage of (cc channels, kr rows, kc columns).
int64_t StageFloats(const ConfigDims& d, int64_t cc, int64_t kr, int64_t kc) {
  return cc * kr * kc * d.w_stride + cc * (d.tile_h + kr - 1) * InStride(d, kc);
}

// Modelled cycles of the whole launch on `num_sms` SMs, two blocks resident per SM. A block holds
// 8192 outputs; two blocks share an SM's 128 fp32 lanes, so each term costs a block 128 cycles of
// issue; each stage adds load latency and two barriers (kStageCycles, a guess). Unmeasured: the
// lead refits it after the H200 run.
double ModelCycles(const Shape& s, const Tiling& t, int num_sms) {
  constexpr double kStageCycles = 800;
  const double terms = static_cast<double>(s.in_channels) * s.kernel_h * s.kernel_w;
  const double block_cycles = 128.0 * terms + kStageCycles * static_cast<double>(t.stages);
  const double waves = std::ceil(static_cast<double>(t.blocks) / (2.0 * std::max(num_sms, 1)));
  return waves * block_cycles;
}

absl::StatusOr<Tiling> PlanForConfig(const Shape& s, int config, int64_t budget_bytes) {
  const ConfigDims& d = kConfigs[config];
  Tiling t;
  t.config = config;
  t.tile_h = d.tile_h;
  t.tile_w = d.tile_w;
  t.block_channels = d.block_channels;
  t.tiles_h = CeilDiv(s.out_h(), d.tile_h);
  t.tiles_w = CeilDiv(s.out_w(), d.tile_w);
  t.channel_blocks = CeilDiv(s.out_channels, d.block_channels);
  // Each factor is at most the dimension it tiles, so this cannot overflow int64.
  t.blocks = s.batch * t.tiles_h * t.tiles_w * t.channel_blocks;
  if (t.blocks > std::numeric_limits<int32_t>::max()) {
    return absl::OutOfRangeError(absl::StrCat("direct_tiled: shape ", s.ToString(), " needs ",
                                              t.blocks, " blocks (limit 2^31-1)"));
  }
  const int64_t budget = budget_bytes / 4;
  const int64_t cin = s.in_channels, kh = s.kernel_h, kw = s.kernel_w;
  int64_t cc = 1, kr = 1, kc = 1;
  if (kh * kw <= kMaxTermsPerFold && StageFloats(d, 1, kh, kw) <= budget) {
    // Whole kernels of several channels (StageFloats is linear in cc).
    const int64_t cc_max =
        std::min({cin, kMaxTermsPerFold / (kh * kw), budget / StageFloats(d, 1, kh, kw)});
    cc = CeilDiv(cin, CeilDiv(cin, cc_max));
    kr = kh;
    kc = kw;
  } else if (kw <= kMaxTermsPerFold && StageFloats(d, 1, 1, kw) <= budget) {
    // One channel, a chunk of whole kernel rows: StageFloats(1, kr, kw) =
    // kr * (kw * w_stride + stride) + (tile_h - 1) * stride.
    const int64_t stride = InStride(d, kw);
    const int64_t kr_max =
        std::min({kh, kMaxTermsPerFold / kw,
                  (budget - (d.tile_h - 1) * stride) / (kw * d.w_stride + stride)});
    kr = CeilDiv(kh, CeilDiv(kh, kr_max));
    kc = kw;
  } else {
    // One channel, one row, a chunk of columns. The stride is at most tile_w + kc + 30, so this
    // kc_max fits; the even split below only lowers it.
    const int64_t kc_max = std::min<int64_t>(
        {kw, kMaxTermsPerFold, (budget - d.tile_h * (d.tile_w + 30)) / (d.w_stride + d.tile_h)});
    if (kc_max < 1) {
      return absl::InvalidArgumentError(absl::StrCat("direct_tiled: shared-memory budget of ",
                                                     budget_bytes, " bytes is too small"));
    }
    kc = CeilDiv(kw, CeilDiv(kw, kc_max));
  }
  t.chan_chunk = static_cast<int>(cc);
  t.row_chunk = static_cast<int>(kr);
  t.col_chunk = static_cast<int>(kc);
  t.in_stride = static_cast<int>(InStride(d, kc));
  t.w_floats = cc * kr * kc * d.w_stride;
  t.stage_bytes = 4 * StageFloats(d, cc, kr, kc);
  t.smem_bytes = 8 * int64_t{kAccDoubles} + t.stage_bytes;
  t.stages = CeilDiv(cin, cc) * CeilDiv(kh, kr) * CeilDiv(kw, kc);
  // The loader's contiguity assumption, and the budget.
  const bool contiguous = (kr == kh && kc == kw) || (cc == 1 && kc == kw) || (cc == 1 && kr == 1);
  if (!contiguous || t.stage_bytes > budget_bytes || cc < 1 || kr < 1 || kc < 1 ||
      cc * kr * kc > kMaxTermsPerFold || t.w_floats % 4 != 0) {
    return absl::InternalError(absl::StrCat("direct_tiled: bad stage plan for ", s.ToString(), ": ",
                                            cc, "x", kr, "x", kc));
  }
  return t;
}

class DirectTiledRunner : public Runner {
 public:
  DirectTiledRunner(const Shape& s, const Tiling& t) : s_(s), t_(t) {}
  size_t workspace_bytes() const override { return 0; }
  absl::Status Run(const RunArgs& a) const override {
    const Params p = MakeParams(s_, t_, a.x, a.w, a.y);
    switch (t_.config) {
      case 0:
        return LaunchConfig<Config16x16x32>(p, t_, a.stream);
      case 1:
        return LaunchConfig<Config16x32x16>(p, t_, a.stream);
      case 2:
        return LaunchConfig<Config32x32x8>(p, t_, a.stream);
      case 3:
        return LaunchConfig<Config8x8x128>(p, t_, a.stream);
    }
    return absl::InternalError(absl::StrCat("direct_tiled: no configuration ", t_.config));
  }

 private:
  Shape s_;
  Tiling t_;
};

class DirectTiled : public AlgorithmWithConfig<Tiling> {
 public:
  std::string name() const override { return "direct_tiled"; }
  // Fitted by tools/fit_auto.py (docs/data/round45_fit_*.json).
  double calibration() const override { return 1.721; }
  absl::Status WithinContract(const Shape& shape) const override {
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The tiling with the smallest modelled time for the device's SM count. The time: ModelCycles
  // at 1.755 GHz and 75% of the issue rate (6 shared loads per 32 FMAs), or the minimal traffic
  // at 3.5 TB/s if that is longer, plus 5 us of launch; calibration() corrects it. With one tap
  // (1x1 kernels) nothing is reused from shared memory and the kernel streams at well under the
  // copy rate: 0.46-0.85 TB/s measured on the nets suite's 1x1 layers of 16-32 input channels
  // at 56x56 and 112x112 (round 87), where 3.5 TB/s had auto pick it over a 2-5x faster
  // implicit_gemm_wgmma.
  absl::StatusOr<Tiling> Choose(const Shape& s, const DeviceInfo& device,
                                double* seconds) const override {
    ASSIGN_OR_RETURN(Tiling t, PlanTiling(s, device.sm_count));
    const double compute = ModelCycles(s, t, device.sm_count) / (1.755e9 * 0.75);
    const bool one_tap = s.kernel_h * s.kernel_w == 1;
    const double memory = s.min_bytes() / (one_tap ? 0.8e12 : 3.5e12);
    *seconds = std::max(compute, memory) + 5e-6;
    return t;
  }
  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Tiling& t,
                                                const DeviceInfo&) const override {
    switch (t.config) {
      case 0:
        RETURN_IF_ERROR(PrepareConfig<Config16x16x32>(t));
        break;
      case 1:
        RETURN_IF_ERROR(PrepareConfig<Config16x32x16>(t));
        break;
      case 2:
        RETURN_IF_ERROR(PrepareConfig<Config32x32x8>(t));
        break;
      case 3:
        RETURN_IF_ERROR(PrepareConfig<Config8x8x128>(t));
        break;
      default:
        return absl::InternalError(absl::StrCat("direct_tiled: no configuration ", t.config));
    }
    return std::unique_ptr<Runner>(new DirectTiledRunner(s, t));
  }
};

}  // namespace

int NumConfigs() { return kNumConfigs; }

absl::StatusOr<Tiling> PlanTiling(const Shape& s, int num_sms, int64_t smem_budget_bytes,
                                  int force_config) {
  RETURN_IF_ERROR(ValidateShape(s));
  for (int64_t v : {s.batch, s.in_channels, s.out_channels, s.height, s.width}) {
    if (v > kMaxDim) {
      return absl::OutOfRangeError(absl::StrCat("direct_tiled indexes tiles with 32-bit integers; ",
                                                "shape ", s.ToString(),
                                                " has a dimension above 2^30"));
    }
  }
  if (force_config >= kNumConfigs) {
    return absl::InvalidArgumentError(
        absl::StrCat("direct_tiled: no configuration ", force_config));
  }
  if (force_config >= 0) return PlanForConfig(s, force_config, smem_budget_bytes);
  std::optional<Tiling> best;
  absl::Status error;
  double best_cycles = std::numeric_limits<double>::infinity();
  for (int c = 0; c < kNumConfigs; ++c) {
    absl::StatusOr<Tiling> t = PlanForConfig(s, c, smem_budget_bytes);
    if (!t.ok()) {
      error.Update(t.status());
      continue;
    }
    const double cycles = ModelCycles(s, *t, num_sms);
    if (cycles < best_cycles) {  // ties go to the earlier (more general) configuration
      best_cycles = cycles;
      best = *t;
    }
  }
  if (!best.has_value()) return error;
  return *best;
}

absl::StatusOr<std::vector<float>> SimulateOnHost(const Shape& s, const Tiling& t, const float* x,
                                                  const float* w) {
  RETURN_IF_ERROR(ValidateShape(s));
  std::vector<float> y(s.output_elements(), std::numeric_limits<float>::quiet_NaN());
  const Params p = MakeParams(s, t, x, w, y.data());
  switch (t.config) {
    case 0:
      RETURN_IF_ERROR(SimulateConfig<Config16x16x32>(p, t.blocks));
      break;
    case 1:
      RETURN_IF_ERROR(SimulateConfig<Config16x32x16>(p, t.blocks));
      break;
    case 2:
      RETURN_IF_ERROR(SimulateConfig<Config32x32x8>(p, t.blocks));
      break;
    case 3:
      RETURN_IF_ERROR(SimulateConfig<Config8x8x128>(p, t.blocks));
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("direct_tiled: no configuration ", t.config));
  }
  return y;
}

}  // namespace direct_tiled_internal

std::unique_ptr<Algorithm> MakeDirectTiled() {
  return std::make_unique<direct_tiled_internal::DirectTiled>();
}

}  // namespace conv2d
