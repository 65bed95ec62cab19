// "triton_igemm": the in-tree example of a Triton kernel as a variant (docs/TRITON.md).
//
// Mapping of the convolution onto the kernel igemm_conv(x, w, y, M, N, K, W, OW, OHW, HW, CHW,
// KW, KHW) (conv/algorithms/triton/igemm_conv.py): a GEMM of M = B*OH*OW output pixels by N = Cout output
// channels over K = Cin*Kh*Kw, launched on a (ceil(M/BLOCK_M), ceil(N/BLOCK_N)) grid. The tile
// sizes come from each artifact's metadata (its recorded constexprs), never repeated here.
#include "conv/algorithms/triton/triton_igemm.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "conv/core/algorithm.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"
#include "conv/algorithms/triton/igemm_artifacts.h"
#include "conv/triton/triton_kernel.h"

namespace conv2d {
namespace {

using triton::ArgType;
using triton::Grid;
using triton::KernelArgs;
using triton::TritonKernel;

constexpr char kName[] = "triton_igemm";

// The kernel's run-time parameters, in order: x, w, y, then ten int32 sizes.
constexpr ArgType kSignature[] = {
    ArgType::kPointer, ArgType::kPointer, ArgType::kPointer, ArgType::kI32, ArgType::kI32,
    ArgType::kI32,     ArgType::kI32,     ArgType::kI32,     ArgType::kI32, ArgType::kI32,
    ArgType::kI32,     ArgType::kI32,     ArgType::kI32};

// Two compiled tile shapes (see AOT_KERNELS in igemm_conv.py): a 64-wide N tile would be mostly
// masked lanes when there are few output channels.
const char* ArtifactFor(const Shape& s) {
  return s.out_channels <= 32 ? "igemm_conv_m64_n32" : "igemm_conv_m128_n64";
}

struct Tiles {
  int64_t block_m = 0, block_n = 0, block_k = 0, chunk = 0;
};

absl::StatusOr<std::unique_ptr<TritonKernel>> CreateKernel(const Shape& s) {
  ASSIGN_OR_RETURN(triton::KernelImage image,
                   triton::ImageFromEmbedded(triton::IgemmConvArtifacts(), ArtifactFor(s)));
  return TritonKernel::Create(std::move(image), kSignature);
}

absl::StatusOr<Tiles> TilesOf(const TritonKernel& k) {
  Tiles t;
  int64_t chunk_tiles = 0;
  ASSIGN_OR_RETURN(t.block_m, k.metadata().Constexpr("BLOCK_M"));
  ASSIGN_OR_RETURN(t.block_n, k.metadata().Constexpr("BLOCK_N"));
  ASSIGN_OR_RETURN(t.block_k, k.metadata().Constexpr("BLOCK_K"));
  ASSIGN_OR_RETURN(chunk_tiles, k.metadata().Constexpr("CHUNK_TILES"));
  if (t.block_m <= 0 || t.block_n <= 0 || t.block_k <= 0 || chunk_tiles <= 0) {
    return absl::InvalidArgumentError(k.label() + ": non-positive tile sizes in its metadata");
  }
  t.chunk = t.block_k * chunk_tiles;
  return t;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The kernel computes offsets in int32, masked lanes included (they form addresses they never
// load). The largest offset any lane of the padded grid can form, per tensor, must stay below
// 2^31; the terms below are the kernel's own offset formulas at their maxima.
absl::Status CheckOffsets(const Shape& s, const Tiles& t) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  const int64_t m = s.batch * oh * ow, n = s.out_channels;
  const int64_t k = s.in_channels * s.kernel_h * s.kernel_w;
  const int64_t hw = s.height * s.width, chw = s.in_channels * hw, khw = s.kernel_h * s.kernel_w;
  const int64_t m_pad = CeilDiv(m, t.block_m) * t.block_m;
  const int64_t n_pad = CeilDiv(n, t.block_n) * t.block_n;
  const int64_t k_pad = CeilDiv(k, t.chunk) * t.chunk;
  const int64_t b_max = (m_pad - 1) / (oh * ow);
  const int64_t c_max = (k_pad - 1) / khw;
  const int64_t x_max = b_max * chw + (oh - 1) * s.width + (ow - 1) + c_max * hw +
                        (s.kernel_h - 1) * s.width + (s.kernel_w - 1);
  const int64_t w_max = (n_pad - 1) * k + (k_pad - 1);
  const int64_t y_max = b_max * n * oh * ow + (oh * ow - 1) + (n_pad - 1) * oh * ow;
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (x_max >= kLimit || w_max >= kLimit || y_max >= kLimit) {
    return absl::UnimplementedError(absl::StrCat(
        kName, ": int32 offsets of the padded tiles would overflow for ", s.ToString()));
  }
  return absl::OkStatus();
}

Grid GridFor(const Shape& s, const Tiles& t) {
  Grid g;
  g.x = static_cast<uint32_t>(CeilDiv(s.batch * s.out_h() * s.out_w(), t.block_m));
  g.y = static_cast<uint32_t>(CeilDiv(s.out_channels, t.block_n));
  return g;
}

KernelArgs ArgsFor(const Shape& s, const float* x, const float* w, float* y) {
  const int64_t ohw = s.out_h() * s.out_w();
  KernelArgs a;
  a.Pointer(x).Pointer(w).Pointer(y);
  a.I32(static_cast<int32_t>(s.batch * ohw));                                   // M
  a.I32(static_cast<int32_t>(s.out_channels));                                  // N
  a.I32(static_cast<int32_t>(s.in_channels * s.kernel_h * s.kernel_w));         // K
  a.I32(static_cast<int32_t>(s.width));                                         // W
  a.I32(static_cast<int32_t>(s.out_w()));                                       // OW
  a.I32(static_cast<int32_t>(ohw));                                             // OHW
  a.I32(static_cast<int32_t>(s.height * s.width));                              // HW
  a.I32(static_cast<int32_t>(s.in_channels * s.height * s.width));              // CHW
  a.I32(static_cast<int32_t>(s.kernel_w));                                      // KW
  a.I32(static_cast<int32_t>(s.kernel_h * s.kernel_w));                         // KHW
  return a;
}

// Everything short of the driver: artifacts, mapping, offsets, grid.
absl::Status CheckMapping(const Shape& s, const TritonKernel& k, const Tiles& t) {
  RETURN_IF_ERROR(CheckFitsInt32(s, kName));
  RETURN_IF_ERROR(CheckOffsets(s, t));
  RETURN_IF_ERROR(k.CheckGrid(GridFor(s, t)));
  return k.CheckArgs(ArgsFor(s, nullptr, nullptr, nullptr));
}

// The embedded artifacts parsed and checked once per process (CanImplement runs per shape and
// must not touch the GPU): their tile sizes, or why they are unusable.
const absl::StatusOr<Tiles>& CheckedTiles(const Shape& s) {
  static std::mutex* mu = new std::mutex;
  static auto* cache = new std::map<std::string, absl::StatusOr<Tiles>>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = cache->find(ArtifactFor(s));
  if (it == cache->end()) {
    absl::StatusOr<Tiles> tiles = [&]() -> absl::StatusOr<Tiles> {
      ASSIGN_OR_RETURN(std::unique_ptr<TritonKernel> kernel, CreateKernel(s));
      return TilesOf(*kernel);
    }();
    it = cache->emplace(ArtifactFor(s), std::move(tiles)).first;
  }
  return it->second;
}

class TritonIgemmRunner : public Runner {
 public:
  TritonIgemmRunner(const Shape& s, std::unique_ptr<TritonKernel> kernel, const Tiles& t)
      : s_(s), kernel_(std::move(kernel)), grid_(GridFor(s, t)) {}

  size_t workspace_bytes() const override { return kernel_->ScratchBytes(grid_); }

  absl::Status Run(const RunArgs& a) const override {
    return kernel_->Launch(grid_, ArgsFor(s_, a.x, a.w, a.y), a.workspace, a.workspace_bytes,
                           a.stream);
  }

 private:
  Shape s_;
  std::unique_ptr<TritonKernel> kernel_;
  Grid grid_;
};

// The proposal carries the tile sizes of the artifact chosen for the shape.
class TritonIgemm : public AlgorithmWithConfig<Tiles> {
 public:
  std::string name() const override { return kName; }
  // Fitted by tools/fit_auto.py (docs/data/round45_fit_*.json).
  double calibration() const override { return 1.882; }
  absl::Status WithinContract(const Shape& shape) const override {
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The time: a deliberately modest prior (20 TFLOP/s, an eighth of the H200's 3xTF32 peak of
  // 495/3) plus launch overhead; calibration() corrects it.
  absl::StatusOr<Tiles> Choose(const Shape& s, const DeviceInfo&, double* seconds) const override {
    const absl::StatusOr<Tiles>& tiles = CheckedTiles(s);
    if (!tiles.ok()) return tiles.status();
    RETURN_IF_ERROR(CheckFitsInt32(s, kName));
    RETURN_IF_ERROR(CheckOffsets(s, *tiles));
    if (GridFor(s, *tiles).y > 65535) {
      return absl::UnimplementedError(absl::StrCat(kName, ": too many output channels"));
    }
    *seconds = s.flops() / 20e12 + 10e-6;
    return *tiles;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Tiles& tiles,
                                                const DeviceInfo& device) const override {
    ASSIGN_OR_RETURN(std::unique_ptr<TritonKernel> kernel, CreateKernel(s));
    RETURN_IF_ERROR(CheckMapping(s, *kernel, tiles));
    RETURN_IF_ERROR(kernel->Load(device.ordinal));
    return std::unique_ptr<Runner>(new TritonIgemmRunner(s, std::move(kernel), tiles));
  }
};

}  // namespace

std::unique_ptr<Algorithm> MakeTritonIgemm() { return std::make_unique<TritonIgemm>(); }

absl::Status CheckTritonIgemmOffline(const Shape& s) {
  RETURN_IF_ERROR(ValidateShape(s));
  ASSIGN_OR_RETURN(std::unique_ptr<TritonKernel> kernel, CreateKernel(s));
  ASSIGN_OR_RETURN(Tiles tiles, TilesOf(*kernel));
  return CheckMapping(s, *kernel, tiles);
}

}  // namespace conv2d
