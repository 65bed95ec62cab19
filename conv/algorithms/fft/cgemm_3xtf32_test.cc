// cgemm_3xtf32 on the GPU against a CPU fp64 reference, both kernels (mma.sync and, on sm_90,
// wgmma): the four channel-mix sizes of the
// KernelBot benchmark and awkward ones (m = 1, odd leading dimensions, tails in every
// dimension, padded strides, a batch stride of 0, mixed magnitudes). Every output element must
// be written (C is NaN-poisoned), nothing outside C's m x n blocks may be (the padding keeps its
// poison), and input padding is NaN so that any read past m, n or k shows. The error bound is
// an fp32 FMA GEMM's: |c - c64| <= 8 (k + 4) 2^-24 sum_l |a_l| |b_l| (8 k for the fp32-level
// accumulation, 32 for the TF32 split's own ~3 * 2^-22 per product); the printed ratio is
// against 8 k 2^-24 sum |a||b| alone, next to cuBLAS fp32's (pedantic, no TF32) on the same
// data. Fails (never skips) when no GPU is present.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "conv/algorithms/fft/cgemm_3xtf32.h"
#include "conv/algorithms/fft/fft_tiled_internal.h"
#include "conv/core/device_buffer.h"
#include "conv/core/timing.h"
#include "gtest/gtest.h"
#include "reference/random.h"

namespace conv2d {
namespace {

using fft_tiled::GemmLayout;

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, fp32's unit roundoff

#define CUDA_OK(expr)                                                           \
  do {                                                                          \
    const cudaError_t err_ = (expr);                                            \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

struct Case {
  std::string name;
  int m, n, k, batch;
  int pad_a = 0, pad_b = 0, pad_c = 0;  // extra leading dimension
  int64_t gap = 0;                      // extra batch stride, in complex elements
  bool shared_b = false;                // stride_b = 0: every f reads the same B
  bool mixed_magnitudes = false;        // elements scaled by 2^[-16, 16]
  bool compare_cublas = false;          // also run cuBLAS fp32 and time both
  uint64_t seed = 1;
};

GemmLayout LayoutOf(const Case& c) {
  GemmLayout l;
  l.m = c.m;
  l.n = c.n;
  l.k = c.k;
  l.lda = c.m + c.pad_a;
  l.ldb = c.n + c.pad_b;
  l.ldc = c.m + c.pad_c;
  l.stride_a = int64_t{l.lda} * l.k + c.gap;
  l.stride_b = c.shared_b ? 0 : int64_t{l.ldb} * l.k + c.gap;
  l.stride_c = int64_t{l.ldc} * l.n + c.gap;
  l.batch = c.batch;
  return l;
}

// Complex elements spanned by a batch of column-major rows x cols blocks.
int64_t Extent(int64_t stride, int ld, int rows, int cols, int batch) {
  return stride * (batch - 1) + int64_t{ld} * (cols - 1) + rows;
}

// Interleaved complex host data: NaN everywhere, then seeded values in each rows x cols block.
std::vector<float> MakeOperand(const Case& c, uint32_t tensor, int64_t stride, int ld, int rows,
                               int cols) {
  const int64_t extent = Extent(stride, ld, rows, cols, c.batch);
  std::vector<float> v(2 * extent, std::nanf(""));
  const int blocks = stride == 0 ? 1 : c.batch;
  for (int f = 0; f < blocks; ++f) {
    for (int col = 0; col < cols; ++col) {
      for (int row = 0; row < rows; ++row) {
        const int64_t e = f * stride + int64_t{col} * ld + row;
        for (int part = 0; part < 2; ++part) {
          const uint64_t index = 2 * static_cast<uint64_t>(e) + part;
          float x = RandomValue(c.seed, tensor, index);
          if (c.mixed_magnitudes) {
            const int exponent = static_cast<int>(SplitMix64(index ^ 0x5bd1e995u) % 33) - 16;
            x = std::ldexp(x, exponent);
          }
          v[2 * e + part] = x;
        }
      }
    }
  }
  return v;
}

struct Check {
  double max_ratio = 0;   // |err| / (8 k u sum|a||b|)
  int64_t checked = 0;
  int64_t failures = 0;
  std::string first_failure;
};

// Compares C_f[i, j] with the fp64 product for one element.
void CheckElement(const GemmLayout& l, const std::vector<float>& a, const std::vector<float>& b,
                  const std::vector<float>& c, int f, int i, int j, Check& out) {
  std::complex<double> sum = 0;
  double magnitude = 0;
  for (int q = 0; q < l.k; ++q) {
    const int64_t ea = f * l.stride_a + int64_t{q} * l.lda + i;
    const int64_t eb = f * l.stride_b + int64_t{q} * l.ldb + j;
    const std::complex<double> x(a[2 * ea], a[2 * ea + 1]);
    const std::complex<double> y(b[2 * eb], b[2 * eb + 1]);
    sum += x * std::conj(y);
    magnitude += std::abs(x) * std::abs(y);
  }
  const int64_t ec = f * l.stride_c + int64_t{j} * l.ldc + i;
  const std::complex<double> got(c[2 * ec], c[2 * ec + 1]);
  const double err = std::abs(got - sum);
  const double unit = 8.0 * l.k * kU * magnitude;
  const double tol = 8.0 * (l.k + 4) * kU * magnitude;
  ++out.checked;
  const double ratio = err / unit;
  if (!(err <= tol)) {  // NaN fails
    if (out.failures++ == 0) {
      out.first_failure = "f " + std::to_string(f) + " i " + std::to_string(i) + " j " +
                          std::to_string(j) + ": got (" + std::to_string(got.real()) + ", " +
                          std::to_string(got.imag()) + ") want (" + std::to_string(sum.real()) +
                          ", " + std::to_string(sum.imag()) + ")";
    }
    out.max_ratio = std::max(out.max_ratio, std::isnan(ratio) ? INFINITY : ratio);
  } else {
    out.max_ratio = std::max(out.max_ratio, ratio);
  }
}

// Frequencies 0, 1, F/2, F-1 (or all, for small batches) in full, and 16 elements of every
// other frequency.
Check CheckOutput(const GemmLayout& l, const std::vector<float>& a, const std::vector<float>& b,
                  const std::vector<float>& c, uint64_t seed) {
  Check out;
  std::vector<int> full = {0, 1, l.batch / 2, l.batch - 1};
  for (int f = 0; f < l.batch; ++f) {
    const bool all = l.batch <= 8 || std::find(full.begin(), full.end(), f) != full.end();
    if (all) {
      for (int j = 0; j < l.n; ++j) {
        for (int i = 0; i < l.m; ++i) CheckElement(l, a, b, c, f, i, j, out);
      }
    } else {
      for (int s = 0; s < 16; ++s) {
        const uint64_t h = SplitMix64(seed * 0x9E3779B97F4A7C15ull + f * 16 + s);
        CheckElement(l, a, b, c, f, static_cast<int>(h % l.m),
                     static_cast<int>((h >> 32) % l.n), out);
      }
    }
  }
  return out;
}

// Every element of every m x n block written (finite: C was NaN-poisoned, inputs are finite),
// every other word of C's extent still the poison pattern.
void CheckWrites(const GemmLayout& l, const std::vector<float>& c, int64_t* unwritten,
                 int64_t* overwritten) {
  std::vector<char> inside(c.size() / 2, 0);
  for (int f = 0; f < l.batch; ++f) {
    for (int j = 0; j < l.n; ++j) {
      for (int i = 0; i < l.m; ++i) inside[f * l.stride_c + int64_t{j} * l.ldc + i] = 1;
    }
  }
  *unwritten = *overwritten = 0;
  for (size_t e = 0; e < inside.size(); ++e) {
    for (int part = 0; part < 2; ++part) {
      const float x = c[2 * e + part];
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      if (inside[e] && !std::isfinite(x)) ++*unwritten;
      if (!inside[e] && bits != 0xFFFFFFFFu) ++*overwritten;
    }
  }
}

// Warm-L2 time: the mean ms of `reps` back-to-back calls after 3 warm-up calls.
absl::StatusOr<double> TimeMs(cudaStream_t stream, int reps, const TimedCall& call) {
  return TimeBackToBack(call, stream, reps, /*warmup=*/3);
}

void RunCaseWith(const Case& cs, CgemmKernel kernel) {
  const char* kernel_name = kernel == CgemmKernel::kWgmma ? "wgmma" : "mma.sync";
  SCOPED_TRACE(cs.name + " " + kernel_name);
  const GemmLayout l = LayoutOf(cs);
  const std::vector<float> a = MakeOperand(cs, kInputTensor, l.stride_a, l.lda, l.m, l.k);
  const std::vector<float> b = MakeOperand(cs, kFilterTensor, l.stride_b, l.ldb, l.n, l.k);
  const int64_t c_extent = Extent(l.stride_c, l.ldc, l.m, l.n, l.batch);
  const size_t c_bytes = static_cast<size_t>(c_extent) * 8;

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  DeviceBuffer da, db, dc;
  CUDA_OK(cudaMalloc(&da.p, a.size() * sizeof(float)));
  CUDA_OK(cudaMalloc(&db.p, b.size() * sizeof(float)));
  CUDA_OK(cudaMalloc(&dc.p, c_bytes));
  CUDA_OK(cudaMemcpy(da.p, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.p, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dc.p, 0xFF, c_bytes));

  const absl::Status st = CgemmConjBatched3xTf32(l, da.p, db.p, dc.p, stream, kernel);
  ASSERT_TRUE(st.ok()) << st;
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<float> c(2 * c_extent);
  CUDA_OK(cudaMemcpy(c.data(), dc.p, c_bytes, cudaMemcpyDeviceToHost));

  int64_t unwritten = 0, overwritten = 0;
  CheckWrites(l, c, &unwritten, &overwritten);
  EXPECT_EQ(unwritten, 0) << "output floats left unwritten (or non-finite)";
  EXPECT_EQ(overwritten, 0) << "floats written outside the m x n blocks";
  const Check ours = CheckOutput(l, a, b, c, cs.seed);
  EXPECT_EQ(ours.failures, 0) << ours.failures << " of " << ours.checked
                              << " elements over the bound; first: " << ours.first_failure;

  std::string cublas_note;
  if (cs.compare_cublas) {
    cublasHandle_t h = nullptr;
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(h, stream), CUBLAS_STATUS_SUCCESS);
    const cuComplex one = make_cuComplex(1, 0), zero = make_cuComplex(0, 0);
    auto cublas = [&] {
      return cublasCgemmStridedBatched(
          h, CUBLAS_OP_N, CUBLAS_OP_C, l.m, l.n, l.k, &one, static_cast<const cuComplex*>(da.p),
          l.lda, l.stride_a, static_cast<const cuComplex*>(db.p), l.ldb, l.stride_b, &zero,
          static_cast<cuComplex*>(dc.p), l.ldc, l.stride_c, l.batch);
    };
    ASSERT_EQ(cublas(), CUBLAS_STATUS_SUCCESS);
    CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<float> cb(2 * c_extent);
    CUDA_OK(cudaMemcpy(cb.data(), dc.p, c_bytes, cudaMemcpyDeviceToHost));
    const Check theirs = CheckOutput(l, a, b, cb, cs.seed);
    const absl::StatusOr<double> ms_ours = TimeMs(stream, 20, [&](cudaStream_t s) {
      return CgemmConjBatched3xTf32(l, da.p, db.p, dc.p, s, kernel);
    });
    ASSERT_TRUE(ms_ours.ok()) << ms_ours.status();
    const absl::StatusOr<double> ms_cublas = TimeMs(stream, 20, [&](cudaStream_t) {
      return cublas() == CUBLAS_STATUS_SUCCESS ? absl::OkStatus()
                                               : absl::InternalError("cublasCgemmStridedBatched");
    });
    ASSERT_TRUE(ms_cublas.ok()) << ms_cublas.status();
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaGetLastError());
    const double gflop = 8.0 * l.m * l.n * l.k * l.batch * 1e-9;
    char note[256];
    std::snprintf(note, sizeof note,
                  " | cublas fp32 max_ratio %.4f | warm-L2 time: 3xtf32 %.4f ms (%.0f TFLOP/s), "
                  "cublas %.4f ms (%.0f TFLOP/s)",
                  theirs.max_ratio, *ms_ours, gflop / *ms_ours, *ms_cublas, gflop / *ms_cublas);
    cublas_note = note;
    cublasDestroy(h);
  }
  std::printf("cgemm_3xtf32 %-8s %-28s m %4d n %4d k %4d F %5d: checked %9lld max_ratio %.4f%s\n",
              kernel_name, cs.name.c_str(), l.m, l.n, l.k, l.batch,
              static_cast<long long>(ours.checked),
              ours.max_ratio, cublas_note.c_str());
  std::fflush(stdout);
  cudaStreamDestroy(stream);
}

// Both kernels: mma.sync (any device) and wgmma (sm_90: the one the library runs on an H200).
void RunCase(const Case& cs) {
  RunCaseWith(cs, CgemmKernel::kMmaSync);
  RunCaseWith(cs, CgemmKernel::kWgmma);
}

TEST(Cgemm3xTf32Test, KernelBotSizes) {
  // (M tiles, Cout, Cin, frequencies) of the channel mix on the benchmark cases.
  RunCase({"kernelbot 128/8/64/4", 100, 64, 64, 544, 0, 0, 0, 0, false, false, true, 11});
  RunCase({"kernelbot 128/16/64/4", 28, 64, 64, 2080, 0, 0, 0, 0, false, false, true, 12});
  RunCase({"kernelbot 256/16/128/2", 50, 128, 128, 2112, 0, 0, 0, 0, false, false, true, 13});
  RunCase({"kernelbot 256/32/128/1", 49, 128, 128, 2112, 0, 0, 0, 0, false, false, true, 14});
}

TEST(Cgemm3xTf32Test, AwkwardSizes) {
  const std::vector<Case> cases = {
      {"m=1", 1, 64, 64, 3},
      {"m=17", 17, 64, 64, 5},
      {"n=8", 28, 8, 64, 4},
      {"k=3", 50, 64, 3, 2},
      {"n=k=5", 5, 5, 5, 1},
      {"1x1x1", 1, 1, 1, 2},
      {"F=1 exact tiles", 32, 64, 16, 1},
      {"m=200 (4 m tiles)", 200, 128, 128, 3},
      {"n=200 (2 n tiles), k=37", 100, 200, 37, 2},
      {"just past tiles", 33, 65, 17, 3},
      {"m=64 n=129 k=129", 64, 129, 129, 2},
      {"m=28 n=128", 28, 128, 64, 9},
  };
  for (const Case& c : cases) RunCase(c);
}

TEST(Cgemm3xTf32Test, PaddedLayouts) {
  // Odd leading dimensions and gaps between the batch's blocks: C's padding must keep its
  // poison, A's and B's padding (NaN) must never be read.
  RunCase({"padded odd ld", 49, 64, 40, 3, 2, 3, 5, 7});
  RunCase({"padded m=1", 1, 16, 9, 4, 1, 1, 1, 1});
  RunCase({"padded big", 50, 128, 128, 3, 1, 0, 3, 13});
}

TEST(Cgemm3xTf32Test, SharedBAndMixedMagnitudes) {
  Case shared{"stride_b = 0", 20, 16, 40, 3};
  shared.shared_b = true;
  RunCase(shared);
  Case mixed{"mixed magnitudes", 50, 128, 128, 2};
  mixed.mixed_magnitudes = true;
  mixed.compare_cublas = true;
  RunCase(mixed);
}

TEST(Cgemm3xTf32Test, RejectsBadArguments) {
  DeviceBuffer buf;
  CUDA_OK(cudaMalloc(&buf.p, 1 << 16));
  char* p = static_cast<char*>(buf.p);
  GemmLayout ok;
  ok.m = ok.n = ok.k = 4;
  ok.lda = ok.ldb = ok.ldc = 4;
  ok.stride_a = ok.stride_b = ok.stride_c = 16;
  ok.batch = 2;
  EXPECT_TRUE(CgemmConjBatched3xTf32(ok, p, p + 4096, p + 8192, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  auto expect_invalid = [&](GemmLayout l, const void* a, const void* b, void* c) {
    const absl::Status st = CgemmConjBatched3xTf32(l, a, b, c, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  };
  GemmLayout l = ok;
  l.m = 0;
  expect_invalid(l, p, p + 4096, p + 8192);
  l = ok;
  l.batch = 0;
  expect_invalid(l, p, p + 4096, p + 8192);
  l = ok;
  l.lda = 3;
  expect_invalid(l, p, p + 4096, p + 8192);
  l = ok;
  l.ldb = 3;
  expect_invalid(l, p, p + 4096, p + 8192);
  l = ok;
  l.stride_c = -1;
  expect_invalid(l, p, p + 4096, p + 8192);
  expect_invalid(ok, nullptr, p + 4096, p + 8192);
  expect_invalid(ok, p + 4, p + 4096, p + 8192);  // 4-byte aligned: not a complex float
  expect_invalid(ok, p, p + 4096, p + 8196);
}

}  // namespace
}  // namespace conv2d
