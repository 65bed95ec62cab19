// The wgmma kernel of the 3xTF32 channel mix (cgemm_3xtf32_sm90.cu) replayed on the CPU: each
// thread's copies into the raw stage and its split into the two TF32 planes (both NaN-filled
// images), its A fragments, the shared operand read back through the matrix descriptor as the PTX ISA defines
// it (start address, leading byte offset between K-adjacent core matrices, stride byte offset
// between the next 8 columns; no swizzle), wgmma.m64nNk8 emulated from the ISA's fragment maps
// written out independently here, the fold, and the epilogue. C is compared with fp64 on every
// element and checked written exactly on the m x n blocks. What it cannot check is the hardware
// itself: that runs in cgemm_3xtf32_test on the GPU. No GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "conv/algorithms/fft/cgemm_3xtf32_internal.h"
#include "conv/algorithms/fft/cgemm_3xtf32_sm90_internal.h"
#include "conv/algorithms/fft/fft_tiled_internal.h"
#include "conv/testing/cpu_replay/tf32_model.h"
#include "gtest/gtest.h"
#include "reference/random.h"

namespace conv2d {
namespace cgemm_3xtf32_sm90 {
namespace {

using fft_tiled::GemmLayout;

struct Cplx {
  float x, y;
};

// kAuto's kernel on the mixes measured in round 32 (tools/mix_kernels; m, n as fft_fused plans
// them): the choice must follow the measurements, whichever way a later rule is written.
TEST(Sm90LayoutTest, AutoTakesWgmmaWhereItMeasuredFaster) {
  struct Mix {
    int m, n;
    bool wgmma;  // the faster kernel, measured
  };
  const Mix mixes[] = {
      {49, 128, true},    // KernelBot case 5: 0.197 against 0.344 ms
      {50, 128, true},    // cases 3-4: 0.188 against 0.335
      {100, 64, true},    // case 1: 0.040 against 0.047
      {28, 64, false},    // case 2: 0.049 against 0.045
      {256, 64, false},   // (32,64,64,56,3): 0.048 against 0.046
      {48, 64, true},     // (8,64,64,64,7): 0.019 against 0.023
      {128, 64, false},   // (8,3,64,224,7): 0.089 against 0.071
      {1152, 32, false},  // (64,32,32,33,3): 0.034 against 0.024
  };
  for (const Mix& x : mixes) {
    GemmLayout l;
    l.m = x.m;
    l.n = x.n;
    l.k = 64;
    EXPECT_EQ(AutoTakesWgmma(l), x.wgmma) << "m " << x.m << " n " << x.n;
  }
}

// The tile choice and the layout claims.
TEST(Sm90LayoutTest, TilesAndPlanes) {
  GemmLayout l;
  l.m = 49;
  l.n = 128;
  EXPECT_EQ(ChooseTile(l).wgs, 2);
  EXPECT_EQ(ChooseTile(l).n_cols, 56);
  l.m = 28;
  l.n = 64;
  EXPECT_EQ(ChooseTile(l).wgs, 1);
  EXPECT_EQ(ChooseTile(l).n_cols, 32);
  for (int n_cols : {32, 56}) {
    // Every (column, K step, slot) of a plane has its own 4 bytes inside the plane.
    std::vector<int> hits(MakeTile(1, n_cols).plane_bytes / 4, 0);
    for (int c = 0; c < 2 * n_cols; ++c) {
      for (int s = 0; s < kSteps; ++s) {
        for (int q = 0; q < 8; ++q) ++hits.at(PlaneOffset(n_cols, c, s, q) / 4);
      }
    }
    for (int h : hits) EXPECT_EQ(h, 1);
    // The split's groups cover every (column, K step) of a stage once; each 8-thread phase of a
    // warp's 16-byte stores fills one 128-byte core-matrix block (no bank conflict).
    std::vector<int> seen(kSteps * n_cols, 0);
    for (int r = 0; r < SplitGroupsPerThread(n_cols, kSplitThreads); ++r) {
      for (int phase = 0; phase < kSplitThreads / 8; ++phase) {
        std::vector<int> blocks, chunks;
        for (int tid = 8 * phase; tid < 8 * phase + 8; ++tid) {
          const SplitGroup g = SplitGroupOf(n_cols, kSplitThreads, tid, r);
          if (!g.valid) continue;
          ++seen.at(g.s * n_cols + g.c);
          const int at = PlaneOffset(n_cols, g.c, g.s, 0);
          EXPECT_EQ(at % 16, 0);
          blocks.push_back(at / 128);
          chunks.push_back(at % 128 / 16);
        }
        if (blocks.empty()) continue;
        std::sort(chunks.begin(), chunks.end());
        EXPECT_EQ(std::unique(chunks.begin(), chunks.end()), chunks.end()) << "bank conflict";
        EXPECT_EQ(*std::min_element(blocks.begin(), blocks.end()),
                  *std::max_element(blocks.begin(), blocks.end()));
      }
    }
    for (int v : seen) EXPECT_EQ(v, 1);
  }
  // Staged rows: a half-warp's 8-byte reads land on 16 distinct bank pairs, for the fragment
  // loads (lanes: 8 rows g by 4 k t) and for the split (4 k by 4 columns).
  for (int wgs : {1, 2}) {
    for (int n_cols : {32, 56}) {
      const Tile T = MakeTile(wgs, n_cols);
      for (int ld : {T.ld_filter, T.ld_input}) {
        EXPECT_EQ(ld % 16, kStagePad);
        for (int half = 0; half < 2; ++half) {
          std::vector<int> frag, split;
          for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
            frag.push_back(StagedOffset(ld, lane / 4, lane % 4) % 16);
            split.push_back(StagedOffset(ld, (lane / 4) % 8, lane % 4) % 16);
          }
          for (auto* v : {&frag, &split}) {
            std::sort(v->begin(), v->end());
            EXPECT_EQ(std::unique(v->begin(), v->end()), v->end()) << "bank conflict, ld " << ld;
          }
        }
      }
      EXPECT_LE(T.smem_bytes, 227 * 1024);
    }
  }
}

// wgmma.mma_async.m64nNk8.f32.tf32.tf32 with A in registers, for one warpgroup, from the ISA:
//   A 64x8: warp w, lane 4g+t: a0 (16w+g, t), a1 (16w+g+8, t), a2 (16w+g, t+4), a3 (16w+g+8, t+4)
//   B 8xN:  element (k, col) of a K-major operand without swizzle at
//           start + (k / 4) * LBO + (col / 8) * SBO + (col % 8) * 16 + (k % 4) * 4 bytes
//   D 64xN: d[4j + v] at row 16w + g + 8 (v >> 1), column 8j + 2t + (v & 1)
// Operands read as the tensor core reads them (TensorCoreOperand: truncated to TF32; the split's
// lo keeps its low bits; the hi operands, a_clean / b_clean, must have them clear), products
// exact, summed in double, rounded once.
void EmulateWgmma(int n_cols, const uint32_t (&a)[128][4], const std::vector<uint32_t>& smem,
                  uint32_t start, uint32_t lbo, uint32_t sbo, bool scale_d,
                  std::vector<std::vector<float>>& d, int* dirty, bool a_clean, bool b_clean) {
  double A[64][8];
  auto value = [&](uint32_t bits, bool clean) { return TensorCoreOperand(bits, clean, dirty); };
  for (int tid = 0; tid < 128; ++tid) {
    const int w = tid / 32, g = (tid % 32) / 4, t = tid % 4;
    A[16 * w + g][t] = value(a[tid][0], a_clean);
    A[16 * w + g + 8][t] = value(a[tid][1], a_clean);
    A[16 * w + g][t + 4] = value(a[tid][2], a_clean);
    A[16 * w + g + 8][t + 4] = value(a[tid][3], a_clean);
  }
  for (int row = 0; row < 64; ++row) {
    for (int col = 0; col < n_cols; ++col) {
      const int w = row / 16, g = row % 8, j = col / 8, t = (col % 8) / 2;
      const int v = 2 * ((row % 16) / 8) + (col & 1);
      float& dst = d[32 * w + 4 * g + t][4 * j + v];
      double s = scale_d ? dst : 0.0;
      for (int k = 0; k < 8; ++k) {
        const uint32_t byte = start + (k / 4) * lbo + (col / 8) * sbo + (col % 8) * 16 + (k % 4) * 4;
        s += A[row][k] * value(smem.at(byte / 4), b_clean);
      }
      dst = static_cast<float>(s);
    }
  }
}

// The kernel for all items, one CTA (of `grid_ctas`) after another, in its own item order.
void Replay(const GemmLayout& l, const std::vector<Cplx>& a, const std::vector<Cplx>& b,
            std::vector<Cplx>& c, int grid_ctas, bool wide, int* dirty) {
  const Tile T = ChooseTile(l);
  const Grid G = MakeGrid(l, T);
  const int kN = T.n_cols, kAcc = kN / 2;
  const int chunks = (l.k + kBk - 1) / kBk;
  const uint32_t kNan = 0x7fc00000u;
  for (int cta = 0; cta < grid_ctas; ++cta) {
    for (int item = cta; item < G.items; item += grid_ctas) {
      const Item it = ItemOf(item, G.tiles_m, G.tiles_n);
      const int64_t fa = it.f * l.stride_a, fb = it.f * l.stride_b, fc = it.f * l.stride_c;
      // run[tid][v], par[tid][v] for Re and Im, per warpgroup.
      // run[wg][tid][v]: Re C in v < kAcc, Im C at v + kAcc.
      std::vector<std::vector<std::vector<float>>> run(T.wgs);
      for (int wg = 0; wg < T.wgs; ++wg) run[wg].assign(128, std::vector<float>(2 * kAcc, 0.0f));
      for (int chunk = 0; chunk < chunks; ++chunk) {
        const int l0 = chunk * kBk;
        // The raw stage, as the cp.async copies fill it (NaN where nothing is copied).
        std::vector<Cplx> raw(kBk * (T.ld_filter + T.ld_input), Cplx{NAN, NAN});
        Cplx* raw_in = raw.data() + kBk * T.ld_filter;
        for (int tid = 0; tid < kCopyThreads; ++tid) {
          if (wide) {
            // Two rows j, j + 1 per 16-byte copy, the second zero-filled past n.
            const int copy_rows = T.rows / 2, step = kCopyThreads / copy_rows;
            for (int r = 0; r < WideFilterCopies(T.rows, kCopyThreads); ++r) {
              const int x = 2 * (tid % copy_rows), kk = tid / copy_rows + r * step;
              for (int h = 0; h < 2; ++h) {
                const int j = it.tn * T.rows + x + h, ll = l0 + kk;
                Cplx& dst = raw.at(StagedOffset(T.ld_filter, x + h, kk));
                EXPECT_TRUE(std::isnan(dst.x)) << "staged filter element copied twice";
                dst = j < l.n && ll < l.k ? b.at(fb + j + static_cast<int64_t>(ll) * l.ldb)
                                          : Cplx{0, 0};
              }
            }
          } else {
            for (int r = 0; r < FilterCopies(T.rows, kCopyThreads); ++r) {
              const int e = tid + r * kCopyThreads, x = e % T.rows, kk = e / T.rows;
              const int j = it.tn * T.rows + x, ll = l0 + kk;
              Cplx& dst = raw.at(StagedOffset(T.ld_filter, x, kk));
              EXPECT_TRUE(std::isnan(dst.x)) << "staged filter element copied twice";
              dst = j < l.n && ll < l.k ? b.at(fb + j + static_cast<int64_t>(ll) * l.ldb)
                                        : Cplx{0, 0};
            }
          }
          const int in_rows = InputRowsPerPass(kN, kCopyThreads);
          for (int r = 0; tid / kN < in_rows && r < InputCopies(kN, kCopyThreads); ++r) {
            const int x = tid % kN, kk = tid / kN + r * in_rows;
            const int i = it.tm * kN + x, ll = l0 + kk;
            Cplx& dst = raw_in[StagedOffset(T.ld_input, x, kk)];
            EXPECT_TRUE(std::isnan(dst.x)) << "staged input element copied twice";
            dst = i < l.m && ll < l.k ? a.at(fa + i + static_cast<int64_t>(ll) * l.lda) : Cplx{0, 0};
          }
        }
        // The split into the planes (NaN before): groups of four k of one column, each (form,
        // slots) row one 16-byte store per plane.
        std::vector<uint32_t> smem(T.buffer_bytes / 4, kNan);
        for (int tid = 0; tid < kSplitThreads; ++tid) {
          for (int r = 0; r < SplitGroupsPerThread(kN, kSplitThreads); ++r) {
            const SplitGroup g = SplitGroupOf(kN, kSplitThreads, tid, r);
            if (!g.valid) continue;
            for (int t = 0; t < 4; ++t) {
              const Cplx x = raw_in[StagedOffset(T.ld_input, g.c, 4 * g.s + t)];
              uint32_t re_hi, re_lo, im_hi, im_lo;
              SplitTf32(x.x, re_hi, re_lo);
              SplitTf32(x.y, im_hi, im_lo);
              auto put = [&](int col, int slot, uint32_t hi, uint32_t lo) {
                uint32_t& h = smem.at(PlaneOffset(kN, col, g.s, slot) / 4);
                uint32_t& w = smem.at((T.plane_bytes + PlaneOffset(kN, col, g.s, slot)) / 4);
                EXPECT_EQ(h, kNan) << "plane word written twice";
                h = hi;
                w = lo;
              };
              put(g.c, t, re_hi, re_lo);  // Re form: (Ar, Ai)
              put(g.c, t + 4, im_hi, im_lo);
              put(g.c + kN, t, im_hi, im_lo);  // Im form: (Ai, -Ar)
              put(g.c + kN, t + 4, re_hi ^ 0x80000000u, re_lo ^ 0x80000000u);
            }
          }
        }
        for (int wg = 0; wg < T.wgs; ++wg) {
          std::vector<std::vector<float>> par(128, std::vector<float>(2 * kAcc, 0.0f));
          for (int s = 0; s < kSteps; ++s) {
            uint32_t a_hi[128][4], a_lo[128][4];
            for (int tid = 0; tid < 128; ++tid) {
              const int warp = tid / 32, lane = tid % 32, t = lane % 4;
              Cplx f[2];
              for (int h = 0; h < 2; ++h) {
                f[h] = raw.at(
                    StagedOffset(T.ld_filter, kRowsPerWg * wg + FragRow(warp, lane, h), 4 * s + t));
              }
              SplitTf32(f[0].x, a_hi[tid][0], a_lo[tid][0]);
              SplitTf32(f[1].x, a_hi[tid][1], a_lo[tid][1]);
              SplitTf32(f[0].y, a_hi[tid][2], a_lo[tid][2]);
              SplitTf32(f[1].y, a_hi[tid][3], a_lo[tid][3]);
            }
            const uint32_t hi = s * (2 * kN / 8) * kStrideBytes, lo = T.plane_bytes + hi;
            const uint64_t desc = Descriptor(hi);
            // The descriptor's fields, decoded as the hardware does.
            const uint32_t lbo = static_cast<uint32_t>((desc >> 16) & 0x3fff) << 4;
            const uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3fff) << 4;
            ASSERT_EQ(static_cast<uint32_t>(desc & 0x3fff) << 4, hi);
            EmulateWgmma(2 * kN, a_lo, smem, hi, lbo, sbo, s > 0, par, dirty, false, true);
            EmulateWgmma(2 * kN, a_hi, smem, lo, lbo, sbo, true, par, dirty, true, false);
            EmulateWgmma(2 * kN, a_hi, smem, hi, lbo, sbo, true, par, dirty, true, true);
          }
          for (int tid = 0; tid < 128; ++tid) {
            for (int v = 0; v < 2 * kAcc; ++v) run[wg][tid][v] += par[tid][v];
          }
        }
      }
      for (int wg = 0; wg < T.wgs; ++wg) {
        for (int tid = 0; tid < 128; ++tid) {
          const int warp = tid / 32, lane = tid % 32;
          for (int v = 0; v < kAcc; ++v) {
            const int j = it.tn * kRowsPerWg * T.wgs + kRowsPerWg * wg + AccRow(warp, lane, v);
            const int i = it.tm * kN + AccCol(lane, v);
            if (j < l.n && i < l.m) {
              c.at(fc + static_cast<int64_t>(j) * l.ldc + i) =
                  Cplx{run[wg][tid][v], run[wg][tid][v + kAcc]};
            }
          }
        }
      }
    }
  }
}

struct Case {
  std::string name;
  int m, n, k, batch, grid_ctas;
  bool wide = false;  // even ldb and stride_b: the kernel's 16-byte filter copies
};

void RunCase(const Case& cs) {
  SCOPED_TRACE(cs.name);
  GemmLayout l;
  l.m = cs.m;
  l.n = cs.n;
  l.k = cs.k;
  l.lda = cs.m + 3;  // padded leading dimensions, as the channel mix's are not
  l.ldb = cs.wide ? (cs.n + 2) / 2 * 2 : cs.n + 1 + cs.n % 2;  // even or odd as asked
  l.ldc = cs.m + 2;
  l.stride_a = static_cast<int64_t>(l.lda) * cs.k + 5;
  l.stride_b = static_cast<int64_t>(l.ldb) * cs.k + (cs.wide ? 6 : 7);
  l.stride_c = static_cast<int64_t>(l.ldc) * cs.n + 1;
  l.batch = cs.batch;
  std::vector<Cplx> a(l.stride_a * cs.batch), b(l.stride_b * cs.batch);
  for (size_t e = 0; e < a.size(); ++e) a[e] = Cplx{RandomValue(17, 0, 2 * e), RandomValue(17, 0, 2 * e + 1)};
  for (size_t e = 0; e < b.size(); ++e) b[e] = Cplx{RandomValue(17, 1, 2 * e), RandomValue(17, 1, 2 * e + 1)};
  const float kPoison = NAN;
  std::vector<Cplx> c(l.stride_c * cs.batch, Cplx{kPoison, kPoison});
  int dirty = 0;
  Replay(l, a, b, c, cs.grid_ctas, cs.wide, &dirty);
  EXPECT_EQ(dirty, 0) << "operands with bits below TF32";
  int64_t bad = 0, unwritten = 0, outside = 0;
  double worst = 0;
  for (int f = 0; f < cs.batch; ++f) {
    for (int j = 0; j < cs.n; ++j) {
      for (int i = 0; i < l.ldc; ++i) {
        const Cplx got = c[f * l.stride_c + static_cast<int64_t>(j) * l.ldc + i];
        if (i >= cs.m) {
          if (!std::isnan(got.x)) ++outside;
          continue;
        }
        std::complex<double> ref = 0;
        double mag = 0;
        for (int ll = 0; ll < cs.k; ++ll) {
          const Cplx x = a[f * l.stride_a + i + static_cast<int64_t>(ll) * l.lda];
          const Cplx y = b[f * l.stride_b + j + static_cast<int64_t>(ll) * l.ldb];
          const std::complex<double> p = std::complex<double>(x.x, x.y) *
                                         std::conj(std::complex<double>(y.x, y.y));
          ref += p;
          mag += std::abs(p);
        }
        if (!std::isfinite(got.x) || !std::isfinite(got.y)) {
          ++unwritten;
          continue;
        }
        // fp32-level bound: 8 (k + 4) 2^-24 sum |a||b|.
        const double bound = 8.0 * (cs.k + 4) * std::ldexp(1.0, -24) * mag + 1e-30;
        const double err = std::abs(std::complex<double>(got.x, got.y) - ref);
        worst = std::max(worst, err / bound);
        if (err > bound) ++bad;
      }
    }
  }
  EXPECT_EQ(unwritten, 0);
  EXPECT_EQ(outside, 0) << "written past m";
  EXPECT_EQ(bad, 0);
  std::printf("%-26s m %3d n %3d k %3d F %d: worst %.4f of the bound\n", cs.name.c_str(), cs.m,
              cs.n, cs.k, cs.batch, worst);
}

TEST(Sm90ReplayTest, MatchesFp64) {
  RunCase({"kernelbot-like (2 wg x 56)", 49, 128, 32, 2, 3});
  RunCase({"one wg x 32", 28, 64, 20, 2, 1});
  RunCase({"tails everywhere", 61, 70, 19, 3, 2});
  RunCase({"tiny", 1, 1, 1, 1, 1});
  RunCase({"kernelbot-like, wide copies", 49, 128, 32, 2, 3, true});
  RunCase({"one wg x 32, wide copies", 28, 64, 20, 2, 1, true});
  RunCase({"n odd, wide copies", 61, 71, 19, 3, 2, true});
  RunCase({"tiny, wide copies", 1, 1, 1, 1, 1, true});
}

}  // namespace
}  // namespace cgemm_3xtf32_sm90
}  // namespace conv2d
