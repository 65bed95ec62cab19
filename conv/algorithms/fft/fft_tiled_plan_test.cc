// fft_tiled on the CPU: tile choice and geometry, workspace liveness, cuFFT/cuBLAS layout extents,
// and an emulation of the whole pipeline that runs the kernels' index algebra and the exact
// cuFFT/cuBLAS parameters (interpreted as their documentation defines them) inside one byte
// workspace laid out as Run lays it out, against the fp64 reference.
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "conv/algorithms/fft/fft_tiled_internal.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace fft_tiled {
namespace {

std::vector<Shape> AllListedShapes() {
  std::vector<Shape> shapes = EdgeShapes();
  for (const Shape& s : KernelBotTestShapes()) shapes.push_back(s);
  for (const Shape& s : KernelBotBenchmarkShapes()) shapes.push_back(s);
  return shapes;
}

TEST(FftTiledPlanTest, CandidatesAreFastRadicesFromKernelToCover) {
  for (auto [k, extent] : {std::pair<int64_t, int64_t>{1, 1}, {1, 17}, {8, 128}, {32, 256},
                           {9, 9}, {5, 1000}, {32, 40}}) {
    const std::vector<int64_t> c = TileSizeCandidates(k, extent);
    ASSERT_FALSE(c.empty());
    for (size_t i = 0; i < c.size(); ++i) {
      int64_t r = c[i];
      while (r % 2 == 0) r /= 2;
      EXPECT_TRUE(r == 1 || r == 3) << c[i];
      EXPECT_GE(c[i], std::max<int64_t>(k, 2));
      if (i > 0) {
        EXPECT_GT(c[i], c[i - 1]);
      }
      if (i + 1 < c.size()) {
        EXPECT_LT(c[i], std::max<int64_t>(extent, 2));
      }
    }
    EXPECT_GE(c.back(), std::max<int64_t>(extent, 2));
  }
  EXPECT_EQ(TileSizeCandidates(8, 16), (std::vector<int64_t>{8, 12, 16}));
  EXPECT_EQ(TileSizeCandidates(1, 1), (std::vector<int64_t>{2}));
  EXPECT_EQ(TileSizeCandidates(5, 5), (std::vector<int64_t>{6}));
}

TEST(FftTiledPlanTest, BadForcedTilesAreRefused) {
  const Shape s{1, 2, 2, 20, 20, 5, 3};
  EXPECT_EQ(ChooseConfig(s, Options{4, 8}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChooseConfig(s, Options{8, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ChooseConfig(s, Options{5, 3}).ok());
  EXPECT_EQ(MakeGeometry(Shape{1, 1, 1, 1, 1, 1, 1}, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Every output element belongs to exactly one tile, and each tile's window holds every input
// its outputs need (rows row0 + i + p < row0 + Th for i < Sh, p < Kh).
void ExpectTilesCoverOutputOnce(const Shape& s, const Geometry& g) {
  ASSERT_GE(g.step_h, 1);
  ASSERT_GE(g.step_w, 1);
  EXPECT_GE(g.tiles_h * g.step_h, s.out_h());
  EXPECT_LT((g.tiles_h - 1) * g.step_h, s.out_h());
  EXPECT_GE(g.tiles_w * g.step_w, s.out_w());
  EXPECT_LT((g.tiles_w - 1) * g.step_w, s.out_w());
  EXPECT_EQ(g.step_h + s.kernel_h - 1, g.tile_h);
  EXPECT_EQ(g.step_w + s.kernel_w - 1, g.tile_w);
  EXPECT_EQ(g.tiles, s.batch * g.tiles_h * g.tiles_w);
  EXPECT_EQ(g.freqs, g.tile_h * (g.tile_w / 2 + 1));
  if (s.batch * s.out_h() * s.out_w() > (1 << 22)) return;
  const Dims d = MakeDims(s, g);
  std::vector<int> hits(s.batch * s.out_h() * s.out_w(), 0);
  for (int m = 0; m < d.tiles; ++m) {
    const TileOrigin t = OriginOf(d, m);
    for (int i = 0; i < d.step_h; ++i) {
      for (int j = 0; j < d.step_w; ++j) {
        const int64_t off = OutputOffset(d, t, /*o=*/0, i, j);
        if (off < 0) continue;
        // Channel 0's offsets of image b are b*Cout*OH*OW + row*OW + col.
        const int64_t plane = s.out_h() * s.out_w();
        ASSERT_EQ(off % (s.out_channels * plane) / plane, 0);
        ++hits[off / (s.out_channels * plane) * plane + off % plane];
      }
    }
  }
  for (size_t k = 0; k < hits.size(); ++k) ASSERT_EQ(hits[k], 1) << s.ToString() << " at " << k;
}

TEST(FftTiledPlanTest, TilesCoverTheOutputExactlyOnce) {
  for (const Shape& s : AllListedShapes()) {
    SCOPED_TRACE(s.ToString());
    absl::StatusOr<Config> c = ChooseConfig(s, Options{});
    ASSERT_TRUE(c.ok()) << c.status();
    ExpectTilesCoverOutputOnce(s, c->geometry);
    // And a few forced sizes, odd and unequal ones included.
    for (int64_t extra : {0, 1, 3, 8}) {
      const int64_t th = std::max<int64_t>(s.kernel_h + extra, 2);
      const int64_t tw = std::max<int64_t>(s.kernel_w + 2 * extra, 2);
      absl::StatusOr<Geometry> g = MakeGeometry(s, th, tw);
      ASSERT_TRUE(g.ok()) << g.status();
      ExpectTilesCoverOutputOnce(s, *g);
    }
  }
}

// Buffers that share bytes are never live at the same step; everything is aligned and inside.
void ExpectLayoutSound(const Shape& s, const Geometry& g, const Options& o,
                       const WorkspaceLayout& w) {
  EXPECT_EQ(w.total_bytes, w.used_bytes + kAlignment);
  for (int a = 0; a < kNumBuffers; ++a) {
    EXPECT_EQ(w.offset[a] % kAlignment, 0u) << BufferName(Buffer(a));
    EXPECT_LE(w.offset[a] + w.bytes[a], w.used_bytes) << BufferName(Buffer(a));
    const Liveness la = BufferLiveness(Buffer(a), o);
    if (w.bytes[a] == 0) continue;
    EXPECT_GE(la.first, 0) << BufferName(Buffer(a)) << " has bytes but is never live";
    for (int b = a + 1; b < kNumBuffers; ++b) {
      if (w.bytes[b] == 0) continue;
      const Liveness lb = BufferLiveness(Buffer(b), o);
      const bool share = w.offset[a] < w.offset[b] + w.bytes[b] &&
                         w.offset[b] < w.offset[a] + w.bytes[a];
      const bool disjoint_in_time = la.last < lb.first || lb.last < la.first;
      EXPECT_TRUE(!share || disjoint_in_time)
          << s.ToString() << ": " << BufferName(Buffer(a)) << " and " << BufferName(Buffer(b))
          << " share bytes while both live";
    }
  }
  const size_t ci = s.in_channels, co = s.out_channels, m = g.tiles, f = g.freqs;
  const size_t t2 = g.tile_elements();
  EXPECT_EQ(w.bytes[kFilterTiles], ci * co * t2 * (o.filter_fp64 ? 8 : 4));
  EXPECT_EQ(w.bytes[kFilterSpectrum], f * ci * co * 8);
  EXPECT_EQ(w.bytes[kFilterSpectrum64], o.filter_fp64 ? f * ci * co * 16 : 0);
  EXPECT_EQ(w.bytes[kInputTiles], ci * m * t2 * 4);
  EXPECT_EQ(w.bytes[kInputSpectrum], f * ci * m * 8);
  EXPECT_EQ(w.bytes[kOutputSpectrum], f * co * m * 8);
  EXPECT_EQ(w.bytes[kOutputTiles], co * m * t2 * 4);
}

TEST(FftTiledPlanTest, WorkspaceBuffersNeverOverlapWhileLive) {
  for (const Shape& s : AllListedShapes()) {
    for (bool fp64 : {false, true}) {
      Options o;
      o.filter_fp64 = fp64;
      absl::StatusOr<Config> c = ChooseConfig(s, o);
      ASSERT_TRUE(c.ok()) << c.status();
      ExpectLayoutSound(s, c->geometry, o, c->workspace);
      // A real cuFFT work area of another size moves only what follows it.
      ExpectLayoutSound(s, c->geometry, o, MakeWorkspaceLayout(s, c->geometry, o, 12345));
      ExpectLayoutSound(s, c->geometry, o, MakeWorkspaceLayout(s, c->geometry, o, 0));
    }
  }
}

// Largest element index + 1 that a cuFFT layout touches on one side.
int64_t Extent(const FftLayout& l, bool input_side, int64_t last_dim) {
  const int* embed = input_side ? l.inembed : l.onembed;
  const int64_t stride = input_side ? l.istride : l.ostride;
  const int64_t dist = input_side ? l.idist : l.odist;
  return (l.batch - int64_t{1}) * dist +
         ((l.n[0] - int64_t{1}) * embed[1] + (last_dim - 1)) * stride + 1;
}

TEST(FftTiledPlanTest, FftAndGemmLayoutsMatchTheBuffers) {
  for (const Shape& s : AllListedShapes()) {
    SCOPED_TRACE(s.ToString());
    absl::StatusOr<Config> c = ChooseConfig(s, Options{});
    ASSERT_TRUE(c.ok()) << c.status();
    const Geometry& g = c->geometry;
    const int64_t t2 = g.tile_elements(), half = g.tile_w / 2 + 1, f = g.freqs;
    const int64_t ci = s.in_channels, co = s.out_channels, m = g.tiles;
    const FftLayout fl = FilterForwardLayout(s, g), il = InputForwardLayout(s, g),
                    vl = InverseLayout(s, g);
    // Real sides are dense tiles; complex sides are exactly F x batch, frequency-major.
    EXPECT_EQ(Extent(fl, true, g.tile_w), ci * co * t2);
    EXPECT_EQ(Extent(fl, false, half), f * ci * co);
    EXPECT_EQ(Extent(il, true, g.tile_w), ci * m * t2);
    EXPECT_EQ(Extent(il, false, half), f * ci * m);
    EXPECT_EQ(Extent(vl, true, half), f * co * m);
    EXPECT_EQ(Extent(vl, false, g.tile_w), co * m * t2);
    for (const FftLayout* l : {&fl, &il, &vl}) {
      EXPECT_EQ(l->n[0], g.tile_h);
      EXPECT_EQ(l->n[1], g.tile_w);
    }
    // GEMM: the last element of the last batch entry is the last element of each spectrum.
    const GemmLayout gl = ChannelMixLayout(s, g);
    EXPECT_EQ((gl.batch - 1) * gl.stride_a + (gl.m - 1) + (gl.k - 1) * int64_t{gl.lda} + 1,
              f * ci * m);
    EXPECT_EQ((gl.batch - 1) * gl.stride_b + (gl.n - 1) + (gl.k - 1) * int64_t{gl.ldb} + 1,
              f * ci * co);
    EXPECT_EQ((gl.batch - 1) * gl.stride_c + (gl.m - 1) + (gl.n - 1) * int64_t{gl.ldc} + 1,
              f * co * m);
    EXPECT_GE(gl.lda, std::max(1, gl.m));
    EXPECT_GE(gl.ldb, std::max(1, gl.n));
    EXPECT_GE(gl.ldc, std::max(1, gl.m));
  }
}

TEST(FftTiledPlanTest, HugeShapesAreRefusedWithAReason) {
  // 4 GiB of input alone: within int32 elements, beyond the 2 GiB workspace limit.
  absl::StatusOr<Config> c = ChooseConfig(Shape::KernelBot(1024, 3, 128, 8), Options{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(c.status().message().find("workspace"), absl::string_view::npos) << c.status();
  // Beyond int32 indexing altogether.
  c = ChooseConfig(Shape{1 << 12, 1 << 10, 1, 1 << 5, 1 << 5, 1, 1}, Options{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kOutOfRange);
}

TEST(FftTiledPlanTest, CandidatesPastTheLargestTileAreSkipped) {
  // 2^25 rows: the candidates that cover the height (3 * 2^23, 2^25) exceed the largest tile
  // (2^24); smaller tiles still serve, so the plan must not fail on those candidates.
  const Shape s{1, 1, 1, int64_t{1} << 25, 2, 1, 1};
  absl::StatusOr<Config> c = ChooseConfig(s, Options{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_LE(c->geometry.tile_h, int64_t{1} << 24);
  ExpectTilesCoverOutputOnce(s, c->geometry);
}

TEST(FftTiledPlanTest, BenchmarkShapesFitInOneGibibyte) {
  std::printf("%-28s %-7s %4s %5s %8s %8s %9s %8s %9s\n", "shape", "tile", "M", "F", "GEMM GF",
              "FFT GF", "bytes MB", "pred ms", "ws MiB");
  double log_sum = 0;
  const std::vector<Shape> cases = KernelBotBenchmarkShapes();
  for (const Shape& s : cases) {
    absl::StatusOr<Config> c = ChooseConfig(s, Options{});
    ASSERT_TRUE(c.ok()) << c.status();
    const Geometry& g = c->geometry;
    std::printf("%-28s %3lldx%-3lld %4lld %5lld %8.2f %8.2f %9.1f %8.3f %9.1f\n",
                s.ToString().c_str(), static_cast<long long>(g.tile_h),
                static_cast<long long>(g.tile_w), static_cast<long long>(g.tiles),
                static_cast<long long>(g.freqs), c->cost.gemm_flops * 1e-9,
                c->cost.fft_flops * 1e-9, c->cost.bytes * 1e-6, c->cost.seconds * 1e3,
                c->workspace.total_bytes / 1048576.0);
    EXPECT_LE(c->workspace.total_bytes, kTargetWorkspaceBytes) << s.ToString();
    log_sum += std::log(c->cost.seconds);
  }
  std::printf("predicted geomean %.3f ms\n", std::exp(log_sum / cases.size()) * 1e3);
}

// ---- Emulation ---------------------------------------------------------------------------------

// The workspace as raw bytes, poisoned with 0xFF (NaN in float and double): a read of anything
// not written first propagates NaN to y.
class Bytes {
 public:
  explicit Bytes(size_t n) : b_(n, 0xFF) {}
  template <typename T>
  T Load(size_t byte_offset, int64_t index) const {
    const size_t at = byte_offset + static_cast<size_t>(index) * sizeof(T);
    EXPECT_LE(at + sizeof(T), b_.size());
    T v;
    std::memcpy(&v, b_.data() + at, sizeof(T));
    return v;
  }
  template <typename T>
  void Store(size_t byte_offset, int64_t index, T v) {
    const size_t at = byte_offset + static_cast<size_t>(index) * sizeof(T);
    ASSERT_LE(at + sizeof(T), b_.size());
    std::memcpy(b_.data() + at, &v, sizeof(T));
  }

 private:
  std::vector<unsigned char> b_;
};

using cd = std::complex<double>;

cd Twiddle(int64_t k, int64_t i, int64_t n, int sign) {
  const double a = sign * 2.0 * M_PI * static_cast<double>((k * i) % n) / n;
  return cd(std::cos(a), std::sin(a));
}

// cuFFT's batched 2D R2C/D2Z as its Advanced Data Layout section defines it: element (i0, i1) of
// transform b at b*idist + (i0*inembed[1] + i1)*istride; forward sign -1, unnormalised.
template <typename Real>
void EmulateR2C(const FftLayout& l, Bytes& ws, size_t in, size_t out) {
  const int n0 = l.n[0], n1 = l.n[1], h = n1 / 2 + 1;
  std::vector<cd> rows(n0 * h);
  for (int b = 0; b < l.batch; ++b) {
    for (int i0 = 0; i0 < n0; ++i0) {
      for (int k1 = 0; k1 < h; ++k1) {
        cd acc = 0;
        for (int i1 = 0; i1 < n1; ++i1) {
          const double v = ws.Load<Real>(
              in, int64_t{b} * l.idist + (int64_t{i0} * l.inembed[1] + i1) * l.istride);
          acc += v * Twiddle(k1, i1, n1, -1);
        }
        rows[i0 * h + k1] = acc;
      }
    }
    for (int k0 = 0; k0 < n0; ++k0) {
      for (int k1 = 0; k1 < h; ++k1) {
        cd acc = 0;
        for (int i0 = 0; i0 < n0; ++i0) acc += rows[i0 * h + k1] * Twiddle(k0, i0, n0, -1);
        const int64_t e =
            int64_t{b} * l.odist + (int64_t{k0} * l.onembed[1] + k1) * int64_t{l.ostride};
        ws.Store<Real>(out, 2 * e, static_cast<Real>(acc.real()));
        ws.Store<Real>(out, 2 * e + 1, static_cast<Real>(acc.imag()));
      }
    }
  }
}

// cuFFT's C2R: the Hermitian half in, the real inverse (sign +1, unnormalised) out.
void EmulateC2R(const FftLayout& l, Bytes& ws, size_t in, size_t out) {
  const int n0 = l.n[0], n1 = l.n[1], h = n1 / 2 + 1;
  std::vector<cd> cols(n0 * h);
  for (int b = 0; b < l.batch; ++b) {
    for (int i0 = 0; i0 < n0; ++i0) {
      for (int k1 = 0; k1 < h; ++k1) {
        cd acc = 0;
        for (int k0 = 0; k0 < n0; ++k0) {
          const int64_t e =
              int64_t{b} * l.idist + (int64_t{k0} * l.inembed[1] + k1) * int64_t{l.istride};
          const cd z(ws.Load<float>(in, 2 * e), ws.Load<float>(in, 2 * e + 1));
          acc += z * Twiddle(k0, i0, n0, +1);
        }
        cols[i0 * h + k1] = acc;
      }
    }
    // Each row is now the half spectrum of a real sequence: P[n1 - k] = conj(P[k]).
    for (int i0 = 0; i0 < n0; ++i0) {
      for (int i1 = 0; i1 < n1; ++i1) {
        double acc = 0;
        for (int k1 = 0; k1 < n1; ++k1) {
          const cd p = k1 < h ? cols[i0 * h + k1] : std::conj(cols[i0 * h + (n1 - k1)]);
          acc += (p * Twiddle(k1, i1, n1, +1)).real();
        }
        ws.Store<float>(out, int64_t{b} * l.odist + (int64_t{i0} * l.onembed[1] + i1) * l.ostride,
                        static_cast<float>(acc));
      }
    }
  }
}

// cublasCgemmStridedBatched(N, C): C_f[i + j*ldc] = sum_l A_f[i + l*lda] * conj(B_f[j + l*ldb]).
void EmulateGemm(const GemmLayout& g, Bytes& ws, size_t a, size_t b, size_t c) {
  auto load = [&](size_t base, int64_t e) {
    return cd(ws.Load<float>(base, 2 * e), ws.Load<float>(base, 2 * e + 1));
  };
  for (int f = 0; f < g.batch; ++f) {
    for (int i = 0; i < g.m; ++i) {
      for (int j = 0; j < g.n; ++j) {
        cd acc = 0;
        for (int l = 0; l < g.k; ++l) {
          acc += load(a, f * g.stride_a + i + int64_t{l} * g.lda) *
                 std::conj(load(b, f * g.stride_b + j + int64_t{l} * g.ldb));
        }
        const int64_t e = f * g.stride_c + i + int64_t{j} * g.ldc;
        ws.Store<float>(c, 2 * e, static_cast<float>(acc.real()));
        ws.Store<float>(c, 2 * e + 1, static_cast<float>(acc.imag()));
      }
    }
  }
}

// Run's steps, in order, with the kernels' loops written as the kernels write them.
std::vector<float> Emulate(const Shape& s, const Options& o, const std::vector<float>& x,
                           const std::vector<float>& w, Geometry* used) {
  absl::StatusOr<Config> c = ChooseConfig(s, o);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return {};
  const Geometry& g = c->geometry;
  *used = g;
  const WorkspaceLayout& L = c->workspace;
  const Dims d = MakeDims(s, g);
  Bytes ws(L.used_bytes);
  auto at = [&](Buffer b) { return L.offset[b]; };
  const int64_t t2 = g.tile_elements();

  // pad filter
  for (int n = 0; n < d.in_channels * d.out_channels; ++n) {
    const int ch = n / d.out_channels, oc = n % d.out_channels;
    for (int u = 0; u < d.tile_h; ++u) {
      for (int v = 0; v < d.tile_w; ++v) {
        const int64_t src = FilterOffset(d, oc, ch, u, v);
        const float val = src >= 0 ? w[src] : 0.0f;
        if (o.filter_fp64) {
          ws.Store<double>(at(kFilterTiles), n * t2 + u * d.tile_w + v, val);
        } else {
          ws.Store<float>(at(kFilterTiles), n * t2 + u * d.tile_w + v, val);
        }
      }
    }
  }
  // filter transform
  if (o.filter_fp64) {
    EmulateR2C<double>(FilterForwardLayout(s, g), ws, at(kFilterTiles), at(kFilterSpectrum64));
    const int64_t count = g.freqs * s.in_channels * s.out_channels;
    for (int64_t i = 0; i < 2 * count; ++i) {
      ws.Store<float>(at(kFilterSpectrum), i,
                      static_cast<float>(ws.Load<double>(at(kFilterSpectrum64), i)));
    }
  } else {
    EmulateR2C<float>(FilterForwardLayout(s, g), ws, at(kFilterTiles), at(kFilterSpectrum));
  }
  // gather
  for (int n = 0; n < d.in_channels * d.tiles; ++n) {
    const int ch = n / d.tiles, m = n % d.tiles;
    const TileOrigin t = OriginOf(d, m);
    for (int u = 0; u < d.tile_h; ++u) {
      for (int v = 0; v < d.tile_w; ++v) {
        const int64_t src = InputOffset(d, t, ch, u, v);
        ws.Store<float>(at(kInputTiles), n * t2 + u * d.tile_w + v, src >= 0 ? x[src] : 0.0f);
      }
    }
  }
  EmulateR2C<float>(InputForwardLayout(s, g), ws, at(kInputTiles), at(kInputSpectrum));
  EmulateGemm(ChannelMixLayout(s, g), ws, at(kInputSpectrum), at(kFilterSpectrum),
              at(kOutputSpectrum));
  EmulateC2R(InverseLayout(s, g), ws, at(kOutputSpectrum), at(kOutputTiles));
  // crop
  std::vector<float> y(s.output_elements(), std::numeric_limits<float>::quiet_NaN());
  const float scale = static_cast<float>(1.0 / static_cast<double>(t2));
  for (int n = 0; n < d.out_channels * d.tiles; ++n) {
    const int oc = n / d.tiles, m = n % d.tiles;
    const TileOrigin t = OriginOf(d, m);
    for (int i = 0; i < d.step_h; ++i) {
      for (int j = 0; j < d.step_w; ++j) {
        const int64_t dst = OutputOffset(d, t, oc, i, j);
        if (dst >= 0) y[dst] = ws.Load<float>(at(kOutputTiles), n * t2 + i * d.tile_w + j) * scale;
      }
    }
  }
  return y;
}

// testbed's Compare computes the same ratio, but depending on the GPU testbed would tie this
// CPU test to every variant's CUDA build.
double WorstRatio(const std::vector<float>& y, const std::vector<double>& want) {
  double worst = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    const double r = std::abs(y[k] - want[k]) / (kAbsTol + kRelTol * std::abs(want[k]));
    worst = std::isnan(r) ? std::numeric_limits<double>::infinity() : std::max(worst, r);
  }
  return worst;
}

void ExpectEmulationMatches(const Shape& s, const Options& o) {
  const std::vector<float> x = RandomTensor(5, kInputTensor, s.input_elements());
  const std::vector<float> w = RandomTensor(5, kFilterTensor, s.filter_elements());
  Geometry g;
  const std::vector<float> y = Emulate(s, o, x, w, &g);
  ASSERT_EQ(y.size(), static_cast<size_t>(s.output_elements())) << s.ToString();
  const double worst = WorstRatio(y, ReferenceConv(s, x.data(), w.data()));
  // The emulation computes in double and stores fp32: far inside the tolerance unless an index
  // is wrong, which gives errors of the size of y itself.
  EXPECT_LT(worst, 0.05) << s.ToString() << " tile " << g.tile_h << "x" << g.tile_w
                         << (o.filter_fp64 ? " fp64 filter" : "");
}

TEST(FftTiledEmulationTest, EdgeShapesWithTheChosenTiles) {
  for (const Shape& s : EdgeShapes()) {
    ExpectEmulationMatches(s, Options{});
  }
}

TEST(FftTiledEmulationTest, ForcedTileSizes) {
  const std::vector<Shape> shapes = {
      {1, 1, 1, 1, 1, 1, 1},  {2, 3, 2, 5, 7, 1, 1},  {1, 2, 3, 6, 6, 6, 6},
      {2, 2, 3, 9, 7, 4, 3},  {1, 1, 2, 12, 10, 10, 8}, {3, 2, 2, 7, 11, 2, 5},
      {1, 3, 2, 13, 4, 1, 4},
  };
  for (const Shape& s : shapes) {
    const int64_t kh = std::max<int64_t>(s.kernel_h, 2), kw = std::max<int64_t>(s.kernel_w, 2);
    for (auto [th, tw] : {std::pair<int64_t, int64_t>{kh, kw}, {kh + 1, kw + 2},
                          {kh + 4, kw + 3}, {16, 16}, {5, 12}}) {
      if (th < kh || tw < kw) continue;
      Options o;
      o.tile_h = th;
      o.tile_w = tw;
      ExpectEmulationMatches(s, o);
    }
  }
}

TEST(FftTiledEmulationTest, Fp64FilterTransform) {
  for (const Shape& s : {Shape{2, 2, 3, 9, 7, 4, 3}, Shape{1, 3, 16, 33, 31, 3, 3}}) {
    Options o;
    o.filter_fp64 = true;
    ExpectEmulationMatches(s, o);
  }
}

}  // namespace
}  // namespace fft_tiled
}  // namespace conv2d
