// "fft_tiled": overlap-save tiled FFT convolution from cuFFT, cuBLAS and three small kernels.
// Steps of Run, all on the caller's stream, every buffer carved from the caller's workspace
// (layout, index algebra and the cuFFT/cuBLAS parameters: fft_tiled_internal.h):
//   pad filter -> filter R2C (or D2Z + round) -> gather input tiles -> input R2C
//   -> per-frequency CGEMM (conj of the filter spectrum) -> C2R -> crop and scale by 1/(Th*Tw).
// The CGEMM is cuBLAS's fp32 one, or with Options::gemm_3xtf32 (registered as "fft_tiled_3xtf32")
// cgemm_3xtf32's split-precision tensor-core kernel.
// The FFTs write frequency-major spectra directly (ostride = transform count, odist = 1), so the
// GEMM needs no transposes.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/fft/cgemm_3xtf32.h"
#include "conv/core/cublas_handle.h"
#include "conv/core/cuda_status.h"
#include "tools/lab/fft_tiled.h"
#include "conv/algorithms/fft/fft_algorithm.h"
#include "conv/algorithms/fft/fft_tiled_internal.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace fft_tiled {
namespace {

const char* CufftResultName(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "cufftResult";
  }
}

absl::Status CufftStatus(cufftResult r, const char* what) {
  if (r == CUFFT_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("fft_tiled: ", what, ": ", CufftResultName(r), " (", static_cast<int>(r), ")"));
}

// A 256-thread block shaped to a tile row: x covers the row (up to 32), y the rows.
dim3 TileBlock(int width) {
  int x = 1;
  while (x < width && x < 32) x *= 2;
  return dim3(x, 256 / x);
}

// Block n = c*Cout + o writes filter tile n: w[o, c] in the top-left Kh x Kw corner, zeros
// elsewhere (the zeros are rewritten every call: the workspace is the caller's).
template <typename Real>
__global__ void PadFilterKernel(const float* __restrict__ w, Real* __restrict__ tiles, Dims d) {
  const int n = blockIdx.x;
  const int c = n / d.out_channels, o = n % d.out_channels;
  Real* tile = tiles + static_cast<int64_t>(n) * d.tile_h * d.tile_w;
  for (int u = threadIdx.y; u < d.tile_h; u += blockDim.y) {
    for (int v = threadIdx.x; v < d.tile_w; v += blockDim.x) {
      const int64_t src = FilterOffset(d, o, c, u, v);
      tile[u * d.tile_w + v] = src >= 0 ? static_cast<Real>(__ldg(w + src)) : Real(0);
    }
  }
}

// Block n = c*M + m writes input tile n: the Th x Tw window of channel c at tile m's origin,
// zero past the image.
__global__ void GatherKernel(const float* __restrict__ x, float* __restrict__ tiles, Dims d) {
  const int n = blockIdx.x;
  const int c = n / d.tiles, m = n % d.tiles;
  const TileOrigin t = OriginOf(d, m);
  float* tile = tiles + static_cast<int64_t>(n) * d.tile_h * d.tile_w;
  for (int u = threadIdx.y; u < d.tile_h; u += blockDim.y) {
    for (int v = threadIdx.x; v < d.tile_w; v += blockDim.x) {
      const int64_t src = InputOffset(d, t, c, u, v);
      tile[u * d.tile_w + v] = src >= 0 ? __ldg(x + src) : 0.0f;
    }
  }
}

// Block n = o*M + m copies the valid Sh x Sw corner of output tile n, times 1/(Th*Tw), to y.
__global__ void CropKernel(const float* __restrict__ tiles, float* __restrict__ y, Dims d,
                           float scale) {
  const int n = blockIdx.x;
  const int o = n / d.tiles, m = n % d.tiles;
  const TileOrigin t = OriginOf(d, m);
  const float* tile = tiles + static_cast<int64_t>(n) * d.tile_h * d.tile_w;
  for (int i = threadIdx.y; i < d.step_h; i += blockDim.y) {
    for (int j = threadIdx.x; j < d.step_w; j += blockDim.x) {
      const int64_t dst = OutputOffset(d, t, o, i, j);
      if (dst >= 0) y[dst] = tile[i * d.tile_w + j] * scale;
    }
  }
}

__global__ void RoundSpectrumKernel(const cufftDoubleComplex* __restrict__ in,
                                    cufftComplex* __restrict__ out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const cufftDoubleComplex v = in[i];
    out[i] = make_cuComplex(static_cast<float>(v.x), static_cast<float>(v.y));
  }
}

// A cuFFT plan that uses the work area it is given in Run, never its own.
class FftPlan {
 public:
  FftPlan() = default;
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;
  ~FftPlan() {
    if (valid_) cufftDestroy(handle_);
  }

  absl::Status Make(const FftLayout& l, cufftType type, size_t* work_bytes) {
    RETURN_IF_ERROR(CufftStatus(cufftCreate(&handle_), "cufftCreate"));
    valid_ = true;
    RETURN_IF_ERROR(CufftStatus(cufftSetAutoAllocation(handle_, 0), "cufftSetAutoAllocation"));
    int n[2] = {l.n[0], l.n[1]};
    int inembed[2] = {l.inembed[0], l.inembed[1]};
    int onembed[2] = {l.onembed[0], l.onembed[1]};
    return CufftStatus(cufftMakePlanMany(handle_, 2, n, inembed, l.istride, l.idist, onembed,
                                         l.ostride, l.odist, type, l.batch, work_bytes),
                       "cufftMakePlanMany");
  }

  absl::Status Bind(cudaStream_t stream, void* work) const {
    RETURN_IF_ERROR(CufftStatus(cufftSetStream(handle_, stream), "cufftSetStream"));
    return CufftStatus(cufftSetWorkArea(handle_, work), "cufftSetWorkArea");
  }

  cufftHandle get() const { return handle_; }

 private:
  cufftHandle handle_ = 0;
  bool valid_ = false;
};

class FftTiledRunner : public Runner {
 public:
  FftTiledRunner(const Shape& shape, const Options& options, const Geometry& g)
      : shape_(shape), options_(options), g_(g), dims_(MakeDims(shape, g)) {}
  FftTiledRunner(const FftTiledRunner&) = delete;
  FftTiledRunner& operator=(const FftTiledRunner&) = delete;

  absl::Status Init() {
    size_t filter_work = 0, input_work = 0, inverse_work = 0;
    RETURN_IF_ERROR(filter_plan_.Make(FilterForwardLayout(shape_, g_),
                                      options_.filter_fp64 ? CUFFT_D2Z : CUFFT_R2C, &filter_work));
    RETURN_IF_ERROR(input_plan_.Make(InputForwardLayout(shape_, g_), CUFFT_R2C, &input_work));
    RETURN_IF_ERROR(inverse_plan_.Make(InverseLayout(shape_, g_), CUFFT_C2R, &inverse_work));
    layout_ = MakeWorkspaceLayout(shape_, g_, options_,
                                  std::max({filter_work, input_work, inverse_work}));
    if (layout_.total_bytes > kMaxWorkspaceBytes) {
      return absl::OutOfRangeError(absl::StrCat(
          "fft_tiled: shape ", shape_.ToString(), " with tile ", g_.tile_h, "x", g_.tile_w,
          " needs ", layout_.total_bytes, " bytes of workspace (cuFFT work area ",
          layout_.bytes[kFftWork], "); the limit is ", kMaxWorkspaceBytes));
    }
    if (options_.gemm_3xtf32) return absl::OkStatus();  // the channel mix needs no cuBLAS
    // Pedantic: fp32 FMA on the CUDA cores only. Neither TF32 nor any emulation may be chosen,
    // whatever the environment says; TF32 would miss the accuracy bar by 60-470x.
    return blas_.Init(CUBLAS_PEDANTIC_MATH);
  }

  size_t workspace_bytes() const override { return layout_.total_bytes; }

  absl::Status Run(const RunArgs& a) const override {
    if (a.workspace == nullptr || a.workspace_bytes < layout_.total_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("fft_tiled: workspace of ",
                                                     a.workspace_bytes, " bytes given, ",
                                                     layout_.total_bytes, " needed"));
    }
    const uintptr_t p = reinterpret_cast<uintptr_t>(a.workspace);
    char* base = reinterpret_cast<char*>((p + kAlignment - 1) / kAlignment * kAlignment);
    auto at = [&](Buffer b) { return static_cast<void*>(base + layout_.offset[b]); };
    const cudaStream_t stream = a.stream;
    const Dims& d = dims_;

    RETURN_IF_ERROR(filter_plan_.Bind(stream, at(kFftWork)));
    RETURN_IF_ERROR(input_plan_.Bind(stream, at(kFftWork)));
    RETURN_IF_ERROR(inverse_plan_.Bind(stream, at(kFftWork)));
    if (blas_.get() != nullptr) {
      RETURN_IF_ERROR(blas_.Bind(stream, at(kBlasWork), layout_.bytes[kBlasWork]));
    }

    // Filter spectrum, recomputed every call.
    const unsigned filter_blocks = static_cast<unsigned>(shape_.in_channels * shape_.out_channels);
    if (options_.filter_fp64) {
      PadFilterKernel<double><<<filter_blocks, TileBlock(d.tile_w), 0, stream>>>(
          a.w, static_cast<double*>(at(kFilterTiles)), d);
      RETURN_IF_ERROR(LaunchStatus("fft_tiled pad filter"));
      RETURN_IF_ERROR(CufftStatus(
          cufftExecD2Z(filter_plan_.get(), static_cast<cufftDoubleReal*>(at(kFilterTiles)),
                       static_cast<cufftDoubleComplex*>(at(kFilterSpectrum64))),
          "filter D2Z"));
      const int64_t count = g_.freqs * shape_.in_channels * shape_.out_channels;
      const int64_t blocks = std::min<int64_t>((count + 255) / 256, int64_t{1} << 20);
      RoundSpectrumKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
          static_cast<const cufftDoubleComplex*>(at(kFilterSpectrum64)),
          static_cast<cufftComplex*>(at(kFilterSpectrum)), count);
      RETURN_IF_ERROR(LaunchStatus("fft_tiled round filter spectrum"));
    } else {
      PadFilterKernel<float><<<filter_blocks, TileBlock(d.tile_w), 0, stream>>>(
          a.w, static_cast<float*>(at(kFilterTiles)), d);
      RETURN_IF_ERROR(LaunchStatus("fft_tiled pad filter"));
      RETURN_IF_ERROR(CufftStatus(
          cufftExecR2C(filter_plan_.get(), static_cast<cufftReal*>(at(kFilterTiles)),
                       static_cast<cufftComplex*>(at(kFilterSpectrum))),
          "filter R2C"));
    }

    // Input spectrum.
    const unsigned input_blocks = static_cast<unsigned>(shape_.in_channels * g_.tiles);
    GatherKernel<<<input_blocks, TileBlock(d.tile_w), 0, stream>>>(
        a.x, static_cast<float*>(at(kInputTiles)), d);
    RETURN_IF_ERROR(LaunchStatus("fft_tiled gather"));
    RETURN_IF_ERROR(CufftStatus(
        cufftExecR2C(input_plan_.get(), static_cast<cufftReal*>(at(kInputTiles)),
                     static_cast<cufftComplex*>(at(kInputSpectrum))),
        "input R2C"));

    // Channel mix: Y_f = X_f * W_f^H for every frequency f.
    const GemmLayout l = ChannelMixLayout(shape_, g_);
    const cuComplex one = make_cuComplex(1.0f, 0.0f), zero = make_cuComplex(0.0f, 0.0f);
    const auto* xs = static_cast<const cuComplex*>(at(kInputSpectrum));
    const auto* ws = static_cast<const cuComplex*>(at(kFilterSpectrum));
    auto* ys = static_cast<cuComplex*>(at(kOutputSpectrum));
    if (options_.gemm_3xtf32) {
      RETURN_IF_ERROR(CgemmConjBatched3xTf32(l, xs, ws, ys, stream));
    } else if (options_.gemm_3m) {
      RETURN_IF_ERROR(blas_.Check(
          cublasCgemm3mStridedBatched(blas_.get(), CUBLAS_OP_N, CUBLAS_OP_C, l.m, l.n, l.k, &one,
                                      xs, l.lda, l.stride_a, ws, l.ldb, l.stride_b, &zero, ys,
                                      l.ldc, l.stride_c, l.batch),
          "cublasCgemm3mStridedBatched"));
    } else {
      RETURN_IF_ERROR(
          blas_.Check(cublasCgemmStridedBatched(blas_.get(), CUBLAS_OP_N, CUBLAS_OP_C, l.m, l.n,
                                                l.k, &one, xs, l.lda, l.stride_a, ws, l.ldb,
                                                l.stride_b, &zero, ys, l.ldc, l.stride_c, l.batch),
                      "cublasCgemmStridedBatched"));
    }

    // Back to the spatial domain (C2R clobbers its input, which is dead by then).
    RETURN_IF_ERROR(CufftStatus(
        cufftExecC2R(inverse_plan_.get(), static_cast<cufftComplex*>(at(kOutputSpectrum)),
                     static_cast<cufftReal*>(at(kOutputTiles))),
        "output C2R"));
    const unsigned output_blocks = static_cast<unsigned>(shape_.out_channels * g_.tiles);
    const float scale = static_cast<float>(1.0 / static_cast<double>(g_.tile_elements()));
    CropKernel<<<output_blocks, TileBlock(d.step_w), 0, stream>>>(
        static_cast<const float*>(at(kOutputTiles)), a.y, d, scale);
    return LaunchStatus("fft_tiled crop");
  }

 private:
  Shape shape_;
  Options options_;
  Geometry g_;
  Dims dims_;
  WorkspaceLayout layout_;
  FftPlan filter_plan_, input_plan_, inverse_plan_;
  CublasHandle blas_{"fft_tiled"};
};

absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& shape, const Options& options,
                                              const Config& config, const DeviceInfo&) {
  auto runner = std::make_unique<FftTiledRunner>(shape, options, config.geometry);
  RETURN_IF_ERROR(runner->Init());
  return std::unique_ptr<Runner>(std::move(runner));
}

std::unique_ptr<Algorithm> Make(const char* name, const Options& options, double calibration) {
  return std::make_unique<FftAlgorithm<Options, Config>>(name, options, calibration, &ChooseConfig,
                                                         &Build, /*cleans=*/false);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Runner>> CreateRunner(const Shape& shape, const Options& options) {
  ASSIGN_OR_RETURN(Config config, ChooseConfig(shape, options));
  return Build(shape, options, config, DeviceInfo::ModelDevice());
}

}  // namespace fft_tiled

// Calibrations fitted by tools/fit_auto.py (docs/data/round45_fit_*.json).
std::unique_ptr<Algorithm> MakeFftTiled() {
  return fft_tiled::Make("fft_tiled", fft_tiled::Options{}, 2.302);
}

std::unique_ptr<Algorithm> MakeFftTiled3xTf32() {
  fft_tiled::Options tensor_cores;
  tensor_cores.gemm_3xtf32 = true;
  return fft_tiled::Make("fft_tiled_3xtf32", tensor_cores, 2.203);
}

}  // namespace conv2d
