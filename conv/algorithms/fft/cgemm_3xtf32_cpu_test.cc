// cgemm_3xtf32 replayed on the CPU: a line-by-line transliteration of CgemmConjKernel (copies
// into a NaN-filled shared-memory image, per-lane fragment loads and TF32 splits, the epilogue's
// masks), with mma.m16n8k8 emulated from the PTX ISA's fragment maps written out independently
// here. The replayed C is compared with fp64 on every element, and checked written exactly on
// the m x n blocks. Also: the tile choice and the bank-conflict claim. No GPU.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "conv/algorithms/fft/cgemm_3xtf32_internal.h"
#include "conv/algorithms/fft/fft_tiled_internal.h"
#include "conv/testing/cpu_replay/tf32_model.h"
#include "gtest/gtest.h"
#include "reference/random.h"

namespace conv2d {
namespace cgemm_3xtf32 {
namespace {

using fft_tiled::GemmLayout;

constexpr double kU = 1.0 / 16777216.0;

struct Cplx {
  float x, y;
};

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 for one warp, from the PTX ISA's maps
// (lane = 4 * groupID + threadID_in_group):
//   A 16x8: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
//   B 8x8:  b0 (row t, col g), b1 (row t+4, col g)
//   C 16x8: c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
// The operands are read as the tensor core reads them (TensorCoreOperand: truncated to TF32; the
// split's lo keeps its low bits, conv/arch/split_3xtf32.h says why), the ones that must be TF32
// already (a_clean, b_clean: the hi parts) are checked to be, and the exact products are summed
// in double.
struct WarpMma {
  uint32_t a[32][4];
  uint32_t b[32][2];
};
void EmulateMma(const WarpMma& in, float (&acc)[32][4], int* dirty_operands, bool a_clean,
                bool b_clean) {
  double A[16][8], B[8][8];
  auto value = [&](uint32_t bits, bool clean) {
    return TensorCoreOperand(bits, clean, dirty_operands);
  };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    A[g][t] = value(in.a[lane][0], a_clean);
    A[g + 8][t] = value(in.a[lane][1], a_clean);
    A[g][t + 4] = value(in.a[lane][2], a_clean);
    A[g + 8][t + 4] = value(in.a[lane][3], a_clean);
    B[t][g] = value(in.b[lane][0], b_clean);
    B[t + 4][g] = value(in.b[lane][1], b_clean);
  }
  double D[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    D[g][2 * t] = acc[lane][0];
    D[g][2 * t + 1] = acc[lane][1];
    D[g + 8][2 * t] = acc[lane][2];
    D[g + 8][2 * t + 1] = acc[lane][3];
  }
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 8; ++c) {
      double s = D[r][c];
      for (int q = 0; q < 8; ++q) s += A[r][q] * B[q][c];
      D[r][c] = s;
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    acc[lane][0] = static_cast<float>(D[g][2 * t]);
    acc[lane][1] = static_cast<float>(D[g][2 * t + 1]);
    acc[lane][2] = static_cast<float>(D[g + 8][2 * t]);
    acc[lane][3] = static_cast<float>(D[g + 8][2 * t + 1]);
  }
}

// The kernel, one CTA at a time, all threads of a step before the next step (the order the
// barriers impose). A stage is refilled with NaN before every copy into it, so a fragment load
// of anything the current copies did not write poisons the result.
class KernelReplay {
 public:
  KernelReplay(const GemmLayout& l, const std::vector<Cplx>& a, const std::vector<Cplx>& b,
               std::vector<Cplx>& c)
      : l_(l), a_(a), b_(b), c_(c), tile_(ChooseTile(l)), grid_(MakeGrid(l, tile_)) {}

  int dirty_operands() const { return dirty_operands_; }

  void Run() {
    for (int64_t block = 0; block < grid_.blocks; ++block) RunBlock(block);
  }

 private:
  void RunBlock(int64_t block) {
    const Tile& T = tile_;
    const BlockCoords bc =
        BlockCoordsOf(block, static_cast<int>(grid_.tiles_m), static_cast<int>(grid_.tiles_n));
    const int m0 = bc.tm * T.bm, n0 = bc.tn * T.bn;
    const int64_t fa = bc.f * l_.stride_a, fb = bc.f * l_.stride_b, fc = bc.f * l_.stride_c;
    smem_.assign(static_cast<size_t>(kStages) * T.stage_complex, Cplx{NAN, NAN});

    auto load = [&](int chunk, int stage) {
      std::fill(smem_.begin() + stage * T.stage_complex,
                smem_.begin() + (stage + 1) * T.stage_complex, Cplx{NAN, NAN});
      for (int tid = 0; tid < T.threads; ++tid) {
        const CopySlot slot_b = CopySlotOf(tid, T.bn), slot_a = CopySlotOf(tid, T.bm);
        const bool row_b_valid = n0 + slot_b.row < l_.n, row_a_valid = m0 + slot_a.row < l_.m;
        const int64_t src_b = row_b_valid ? n0 + slot_b.row : 0;
        const int64_t src_a = row_a_valid ? m0 + slot_a.row : 0;
        const int64_t step_b = static_cast<int64_t>(T.threads / T.bn) * l_.ldb;
        const int64_t step_a = static_cast<int64_t>(T.threads / T.bm) * l_.lda;
        const int sb = stage * T.stage_complex + slot_b.kk * T.lds_b + slot_b.row;
        const int sa =
            stage * T.stage_complex + kBk * T.lds_b + slot_a.kk * T.lds_a + slot_a.row;
        int l = chunk * kBk + slot_b.kk;
        int64_t q = src_b + static_cast<int64_t>(l) * l_.ldb;
        for (int r = 0; r < T.bn * kBk / T.threads; ++r) {
          const bool valid = row_b_valid && l < l_.k;
          smem_[sb + r * (T.threads / T.bn) * T.lds_b] = valid ? b_.at(fb + q) : Cplx{0, 0};
          l += T.threads / T.bn;
          q += step_b;
        }
        l = chunk * kBk + slot_a.kk;
        q = src_a + static_cast<int64_t>(l) * l_.lda;
        for (int r = 0; r < T.bm * kBk / T.threads; ++r) {
          const bool valid = row_a_valid && l < l_.k;
          smem_[sa + r * (T.threads / T.bm) * T.lds_a] = valid ? a_.at(fa + q) : Cplx{0, 0};
          l += T.threads / T.bm;
          q += step_a;
        }
      }
    };

    const int warps = T.warps_n * T.warps_m;
    // re[warp][wn][wm][lane][v]
    std::vector<float> acc_re(static_cast<size_t>(warps) * 2 * 4 * 32 * 4, 0.0f);
    std::vector<float> acc_im(acc_re.size(), 0.0f);
    auto acc = [&](std::vector<float>& v, int warp, int wn, int wm) -> float(&)[32][4] {
      return *reinterpret_cast<float(*)[32][4]>(&v[(((warp * 2 + wn) * 4 + wm) * 32) * 4]);
    };

    const int chunks = (l_.k + kBk - 1) / kBk;
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < chunks) load(s, s);
    }
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int next = chunk + kStages - 1;
      if (next < chunks) load(next, next % kStages);
      for (int warp = 0; warp < warps; ++warp) {
        const int warp_n = warp % T.warps_n, warp_m = warp / T.warps_n;
        const int wn0 = n0 + warp_n * kWarpN, wm0 = m0 + warp_m * kWarpM;
        const int n_act = ActiveTiles(l_.n, wn0, 16, kWarpN / 16);
        const int m_act = ActiveTiles(l_.m, wm0, 8, kWarpM / 8);
        if (n_act == 0 || m_act == 0) continue;
        const int sb = (chunk % kStages) * T.stage_complex + warp_n * kWarpN;
        const int sa = (chunk % kStages) * T.stage_complex + kBk * T.lds_b + warp_m * kWarpM;
        // The stage is summed into fresh partials, then added to the running sums.
        static float part_re[2][4][32][4], part_im[2][4][32][4];
        std::memset(part_re, 0, sizeof part_re);
        std::memset(part_im, 0, sizeof part_im);
        for (int ks = 0; ks < kBk / 4; ++ks) {
          uint32_t ahi[32][2][4], alo[32][2][4], bhi[32][4][2], blo[32][4][2];
          for (int lane = 0; lane < 32; ++lane) {
            const int g = LaneGroup(lane), t = LaneInGroup(lane);
            const int rb = sb + (4 * ks + t) * T.lds_b + g;
            const int ra = sa + (4 * ks + t) * T.lds_a + g;
            for (int wn = 0; wn < 2; ++wn) {
              const Cplx v0 = smem_[rb + 16 * wn], v1 = smem_[rb + 16 * wn + 8];
              SplitTf32(v0.x, ahi[lane][wn][0], alo[lane][wn][0]);
              SplitTf32(v1.x, ahi[lane][wn][1], alo[lane][wn][1]);
              SplitTf32(v0.y, ahi[lane][wn][2], alo[lane][wn][2]);
              SplitTf32(v1.y, ahi[lane][wn][3], alo[lane][wn][3]);
            }
            for (int wm = 0; wm < 4; ++wm) {
              const Cplx u = smem_[ra + 8 * wm];
              SplitTf32(u.x, bhi[lane][wm][0], blo[lane][wm][0]);
              SplitTf32(u.y, bhi[lane][wm][1], blo[lane][wm][1]);
            }
          }
          for (int pass = 0; pass < 3; ++pass) {
            for (int wn = 0; wn < 2; ++wn) {
              for (int wm = 0; wm < 4; ++wm) {
                if (wn >= n_act || wm >= m_act) continue;
                WarpMma mre, mim;
                for (int lane = 0; lane < 32; ++lane) {
                  const uint32_t* a = pass == 0 ? alo[lane][wn] : ahi[lane][wn];
                  const uint32_t* b = pass == 1 ? blo[lane][wm] : bhi[lane][wm];
                  std::memcpy(mre.a[lane], a, sizeof mre.a[lane]);
                  std::memcpy(mim.a[lane], a, sizeof mim.a[lane]);
                  mre.b[lane][0] = b[0];
                  mre.b[lane][1] = b[1];
                  mim.b[lane][0] = b[1];
                  mim.b[lane][1] = b[0] ^ 0x80000000u;
                }
                EmulateMma(mre, part_re[wn][wm], &dirty_operands_, pass != 0, pass != 1);
                EmulateMma(mim, part_im[wn][wm], &dirty_operands_, pass != 0, pass != 1);
              }
            }
          }
        }
        for (int wn = 0; wn < 2; ++wn) {
          for (int wm = 0; wm < 4; ++wm) {
            float(&re)[32][4] = acc(acc_re, warp, wn, wm);
            float(&im)[32][4] = acc(acc_im, warp, wn, wm);
            for (int lane = 0; lane < 32; ++lane) {
              for (int v = 0; v < 4; ++v) {
                re[lane][v] += part_re[wn][wm][lane][v];
                im[lane][v] += part_im[wn][wm][lane][v];
              }
            }
          }
        }
      }
    }

    for (int warp = 0; warp < warps; ++warp) {
      const int warp_n = warp % T.warps_n, warp_m = warp / T.warps_n;
      const int wn0 = n0 + warp_n * kWarpN, wm0 = m0 + warp_m * kWarpM;
      for (int lane = 0; lane < 32; ++lane) {
        for (int wn = 0; wn < 2; ++wn) {
          for (int wm = 0; wm < 4; ++wm) {
            const float(&re)[32][4] = acc(acc_re, warp, wn, wm);
            const float(&im)[32][4] = acc(acc_im, warp, wn, wm);
            for (int h = 0; h < 2; ++h) {
              const int j = wn0 + 16 * wn + AccRow(lane, 2 * h);
              const int i = wm0 + 8 * wm + AccCol(lane, 2 * h);
              if (j >= l_.n || i >= l_.m) continue;
              const int64_t dst = fc + static_cast<int64_t>(j) * l_.ldc + i;
              c_.at(dst) = Cplx{re[lane][2 * h], im[lane][2 * h]};
              if (i + 1 < l_.m) c_.at(dst + 1) = Cplx{re[lane][2 * h + 1], im[lane][2 * h + 1]};
            }
          }
        }
      }
    }
  }

  const GemmLayout l_;
  const std::vector<Cplx>& a_;
  const std::vector<Cplx>& b_;
  std::vector<Cplx>& c_;
  const Tile tile_;
  const Grid grid_;
  std::vector<Cplx> smem_;
  int dirty_operands_ = 0;
};

int64_t Extent(int64_t stride, int ld, int rows, int cols, int batch) {
  return stride * (batch - 1) + int64_t{ld} * (cols - 1) + rows;
}

std::vector<Cplx> Operand(uint64_t seed, uint32_t tensor, int64_t stride, int ld, int rows,
                          int cols, int batch) {
  std::vector<Cplx> v(Extent(stride, ld, rows, cols, batch), Cplx{NAN, NAN});
  for (int f = 0; f < (stride == 0 ? 1 : batch); ++f) {
    for (int col = 0; col < cols; ++col) {
      for (int row = 0; row < rows; ++row) {
        const int64_t e = f * stride + int64_t{col} * ld + row;
        v[e] = Cplx{RandomValue(seed, tensor, 2 * e), RandomValue(seed, tensor, 2 * e + 1)};
      }
    }
  }
  return v;
}

struct Result {
  double max_ratio = 0;
  int64_t failures = 0, unwritten = 0, overwritten = 0;
  int dirty_operands = 0;
};

Result Replay(int m, int n, int k, int batch, int pad = 0, int64_t gap = 0, uint64_t seed = 5) {
  GemmLayout l;
  l.m = m;
  l.n = n;
  l.k = k;
  l.lda = m + pad;
  l.ldb = n + 2 * pad;
  l.ldc = m + 3 * pad;
  l.stride_a = int64_t{l.lda} * k + gap;
  l.stride_b = int64_t{l.ldb} * k + gap;
  l.stride_c = int64_t{l.ldc} * n + gap;
  l.batch = batch;
  const std::vector<Cplx> a = Operand(seed, kInputTensor, l.stride_a, l.lda, m, k, batch);
  const std::vector<Cplx> b = Operand(seed, kFilterTensor, l.stride_b, l.ldb, n, k, batch);
  std::vector<Cplx> c(Extent(l.stride_c, l.ldc, m, n, batch), Cplx{NAN, NAN});
  KernelReplay replay(l, a, b, c);
  replay.Run();

  Result r;
  r.dirty_operands = replay.dirty_operands();
  std::vector<char> inside(c.size(), 0);
  for (int f = 0; f < batch; ++f) {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        const int64_t ec = f * l.stride_c + int64_t{j} * l.ldc + i;
        inside[ec] = 1;
        std::complex<double> sum = 0;
        double magnitude = 0;
        for (int q = 0; q < k; ++q) {
          const Cplx x = a[f * l.stride_a + int64_t{q} * l.lda + i];
          const Cplx y = b[f * l.stride_b + int64_t{q} * l.ldb + j];
          const std::complex<double> xd(x.x, x.y), yd(y.x, y.y);
          sum += xd * std::conj(yd);
          magnitude += std::abs(xd) * std::abs(yd);
        }
        const double err = std::abs(std::complex<double>(c[ec].x, c[ec].y) - sum);
        if (!(err <= 8.0 * (k + 4) * kU * magnitude)) ++r.failures;
        const double ratio = err / (8.0 * k * kU * magnitude);
        r.max_ratio = std::max(r.max_ratio, std::isnan(ratio) ? INFINITY : ratio);
      }
    }
  }
  for (size_t e = 0; e < c.size(); ++e) {
    const bool written = !std::isnan(c[e].x) || !std::isnan(c[e].y);
    if (inside[e] && !written) ++r.unwritten;
    if (!inside[e] && written) ++r.overwritten;
  }
  std::printf("replay m %4d n %4d k %4d F %d pad %d gap %lld: max_ratio %.4f\n", m, n, k, batch,
              pad, static_cast<long long>(gap), r.max_ratio);
  return r;
}

void ExpectClean(const Result& r) {
  EXPECT_EQ(r.failures, 0);
  EXPECT_EQ(r.unwritten, 0);
  EXPECT_EQ(r.overwritten, 0);
  EXPECT_EQ(r.dirty_operands, 0) << "MMA operands with bits below TF32 precision";
}

TEST(Cgemm3xTf32Replay, KernelBotSizesFewFrequencies) {
  ExpectClean(Replay(100, 64, 64, 2));
  ExpectClean(Replay(28, 64, 64, 2));
  ExpectClean(Replay(50, 128, 128, 2));
  ExpectClean(Replay(49, 128, 128, 2));
}

TEST(Cgemm3xTf32Replay, AwkwardSizes) {
  ExpectClean(Replay(1, 64, 64, 2));
  ExpectClean(Replay(17, 64, 64, 2));
  ExpectClean(Replay(28, 8, 64, 2));
  ExpectClean(Replay(50, 64, 3, 2));
  ExpectClean(Replay(5, 5, 5, 1));
  ExpectClean(Replay(1, 1, 1, 2));
  ExpectClean(Replay(200, 128, 40, 1));
  ExpectClean(Replay(100, 200, 37, 1));
  ExpectClean(Replay(33, 65, 17, 2));
  ExpectClean(Replay(28, 128, 20, 3));
}

TEST(Cgemm3xTf32Replay, PaddedLayouts) {
  ExpectClean(Replay(49, 64, 40, 3, 1, 7));
  ExpectClean(Replay(1, 16, 9, 3, 2, 1));
  ExpectClean(Replay(50, 128, 20, 2, 3, 13));
}

// The split itself (rounding, exactness, the bounds, NaN and inf) is tested where it lives:
// conv/arch/split_3xtf32_test.

TEST(Cgemm3xTf32Tile, ChoiceFitsTheSm) {
  for (int m : {1, 28, 32, 33, 49, 50, 100, 200}) {
    for (int n : {5, 64, 65, 128, 200}) {
      GemmLayout l;
      l.m = m;
      l.n = n;
      l.k = 64;
      l.batch = 2112;
      const Tile t = ChooseTile(l);
      EXPECT_LE(t.smem_bytes, size_t{227} * 1024);
      EXPECT_EQ(t.threads % t.bn, 0);
      EXPECT_EQ(t.threads % t.bm, 0);
      EXPECT_EQ(t.bn * kBk % t.threads, 0);
      EXPECT_EQ(t.bm * kBk % t.threads, 0);
      const Grid g = MakeGrid(l, t);
      EXPECT_GE(g.tiles_m * t.bm, m);
      EXPECT_GE(g.tiles_n * t.bn, n);
      EXPECT_LT((g.tiles_m - 1) * t.bm, m);
      EXPECT_LT((g.tiles_n - 1) * t.bn, n);
    }
  }
}

// An LDS.64 is served per half-warp: its 16 lanes' 8-byte words must fall in distinct bank
// pairs, i.e. distinct word offsets mod 16.
TEST(Cgemm3xTf32Tile, FragmentLoadsAreConflictFree) {
  for (const Tile& t : {MakeTile(128, 64), MakeTile(128, 32), MakeTile(64, 64), MakeTile(64, 32)}) {
    for (int lds : {t.lds_b, t.lds_a}) {
      for (int base : {0, 8, 16, 24, 32, 40, 64, 96}) {
        for (int half = 0; half < 2; ++half) {
          std::vector<int> seen(16, 0);
          for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
            const int word = base + (4 + LaneInGroup(lane)) * lds + LaneGroup(lane);
            ++seen[word % 16];
          }
          for (int s : seen) EXPECT_EQ(s, 1) << "lds " << lds << " base " << base;
        }
      }
    }
  }
}

}  // namespace
}  // namespace cgemm_3xtf32
}  // namespace conv2d
