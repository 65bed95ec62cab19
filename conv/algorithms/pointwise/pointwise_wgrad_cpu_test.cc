// pointwise_wgrad's tiling on the CPU: the kernel's partition (slice and tile of each CTA, each
// thread's k-group and 8 x 8 block, each chunk's columns) replayed term by term. Every (o, c, k)
// product is summed exactly once, each thread sums at most kMaxContractReduction terms per
// element in fp32, the ring and the tile's double sums fit an H100's shared memory.
// Mutants (the last slice, a tile, the last k-group dropped) must fail the replay.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/pointwise/pointwise_wgrad.h"
#include "conv/shape.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace pointwise_internal {
namespace {

Shape Pw(int64_t b, int64_t cin, int64_t cout, int64_t h, int64_t w) {
  Shape s{b, cin, cout, h, w, 1, 1};
  s.op = Op::kWgrad;
  return s;
}

enum class Mutant { kNone, kDropSlice, kDropTile, kDropGroup };

// The count of each (o, c, k) product over the kernel's loops; empty string if every product is
// summed once and no thread's sum is longer than the contract allows, else what is wrong.
std::string Replay(const Shape& s, const Tiling& t, Mutant m) {
  const int64_t k_total = s.batch * s.height * s.width;
  const int64_t cout = s.out_channels, cin = s.in_channels;
  std::vector<int> seen(cout * cin * k_total, 0);
  const int bp8 = t.bp / kBlock, bq8 = t.bq / kBlock;
  const int slices = m == Mutant::kDropSlice ? t.slices - 1 : t.slices;
  const int tiles = t.tiles_p * t.tiles_q - (m == Mutant::kDropTile ? 1 : 0);
  const int groups = m == Mutant::kDropGroup ? t.groups - 1 : t.groups;
  for (int slice = 0; slice < slices; ++slice) {
    const int64_t first = int64_t{slice} * t.slice_chunks;
    const int64_t count = std::min<int64_t>(t.slice_chunks, t.chunks - first);
    for (int tile = 0; tile < tiles; ++tile) {
      const int p0 = tile / t.tiles_q * t.bp, q0 = tile % t.tiles_q * t.bq;
      for (int thread = 0; thread < kThreads; ++thread) {
        const int g = thread / t.tile_threads, tt = thread % t.tile_threads;
        if (g >= groups) continue;
        const int tp = tt / bq8, tq = tt % bq8;
        int64_t terms = 0;
        for (int64_t c = first; c < first + count; ++c) {
          for (int kk = g; kk < kChunk; kk += t.groups) {
            ++terms;
            const int64_t k = c * kChunk + kk;
            if (k >= k_total) continue;
            for (int i = 0; i < kBlock; ++i) {
              for (int j = 0; j < kBlock; ++j) {
                const int64_t o = p0 + tp + i * bp8, ch = q0 + tq + j * bq8;
                if (o < cout && ch < cin) ++seen[(o * cin + ch) * k_total + k];
              }
            }
          }
        }
        if (terms > kMaxContractReduction) {
          return absl::StrCat("a thread sums ", terms, " terms in fp32");
        }
      }
    }
  }
  for (size_t e = 0; e < seen.size(); ++e) {
    if (seen[e] != 1) return absl::StrCat("product ", e, " summed ", seen[e], " times");
  }
  return "";
}

std::vector<Shape> Shapes() {
  return {Pw(2, 16, 96, 28, 28),  Pw(2, 96, 24, 14, 14), Pw(1, 3, 5, 7, 9),
          Pw(4, 144, 40, 28, 28), Pw(2, 200, 70, 9, 11), Pw(3, 64, 64, 56, 56),
          Pw(1, 8, 8, 100, 100),  Pw(2, 130, 9, 5, 5),   Pw(1, 1, 1, 1, 1),
          Pw(6, 40, 240, 28, 28), Pw(2, 24, 144, 56, 56)};
}

TEST(PointwiseWgradTiling, EveryProductOnceWithinTheContract) {
  for (const Shape& s : Shapes()) {
    SCOPED_TRACE(s.ToString());
    absl::StatusOr<Tiling> t = TilingFor(s);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_LE(t->terms_per_thread, kMaxContractReduction);
    EXPECT_LE(t->smem_bytes, 227 << 10);  // an H100's opt-in limit
    EXPECT_LE(t->tile_threads * t->groups, kThreads);
    EXPECT_LE(t->bp, kMaxTile);
    EXPECT_LE(t->bq, kMaxTile);
    EXPECT_EQ(Replay(s, *t, Mutant::kNone), "");
  }
}

TEST(PointwiseWgradTiling, MutantsFail) {
  const Shape s = Pw(3, 64, 200, 56, 56);  // several slices, tiles and k-groups
  absl::StatusOr<Tiling> t = TilingFor(s);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_GT(t->slices, 1);
  ASSERT_GT(t->tiles_p * t->tiles_q, 1);
  ASSERT_GT(t->groups, 1);
  for (Mutant m : {Mutant::kDropSlice, Mutant::kDropTile, Mutant::kDropGroup}) {
    EXPECT_NE(Replay(s, *t, m), "");
  }
}

// The networks' long reductions: slices keep every thread's sum within the contract, and the
// split is the shape's alone (two calls agree).
TEST(PointwiseWgradTiling, EfficientNetLayers) {
  for (const Shape& s : {Pw(32, 16, 96, 112, 112), Pw(32, 32, 16, 112, 112),
                         Pw(32, 24, 144, 56, 56), Pw(32, 240, 40, 28, 28),
                         Pw(32, 1152, 320, 7, 7)}) {
    SCOPED_TRACE(s.ToString());
    absl::StatusOr<Tiling> a = TilingFor(s), b = TilingFor(s);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_LE(a->terms_per_thread, kMaxContractReduction);
    EXPECT_EQ(a->slices, b->slices);
    EXPECT_EQ(a->slice_chunks, b->slice_chunks);
    EXPECT_GE(int64_t{a->slices} * a->slice_chunks, a->chunks);
    std::printf("%s: tile %dx%d (%dx%d tiles), %d k-groups, %d slices of %d chunks, %lld CTAs, "
                "%.1f us modelled\n",
                s.ToString().c_str(), a->bp, a->bq, a->tiles_p, a->tiles_q, a->groups, a->slices,
                a->slice_chunks, static_cast<long long>(a->ctas), 1e6 * Seconds(s, *a));
  }
}

TEST(PointwiseWgradAlgorithm, RefusesWhatItDoesNotCompute) {
  std::unique_ptr<Algorithm> a = MakePointwiseWgrad();
  Shape k3 = Pw(1, 8, 8, 10, 10);
  k3.kernel_h = k3.kernel_w = 3;
  EXPECT_EQ(a->CanImplement(k3).code(), absl::StatusCode::kUnimplemented);
  Shape fwd = Pw(1, 8, 8, 10, 10);
  fwd.op = Op::kFprop;
  EXPECT_EQ(a->CanImplement(fwd).code(), absl::StatusCode::kUnimplemented);
  Shape dgrad = fwd;
  dgrad.op = Op::kDgrad;
  EXPECT_EQ(a->CanImplement(dgrad).code(), absl::StatusCode::kUnimplemented);
  Shape strided = Pw(1, 8, 8, 10, 10);
  strided.stride_h = strided.stride_w = 2;
  EXPECT_EQ(a->CanImplement(strided).code(), absl::StatusCode::kUnimplemented);
  Shape grouped = Pw(1, 8, 8, 10, 10);
  grouped.groups = 2;
  EXPECT_EQ(a->CanImplement(grouped).code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(a->CanImplement(Pw(2, 16, 96, 28, 28)).ok());
}

}  // namespace
}  // namespace pointwise_internal
}  // namespace conv2d
