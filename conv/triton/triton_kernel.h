// Runs kernels compiled ahead of time by OpenAI Triton from C++, with no Python at run time.
//
// Input: what triton.compile produces for one kernel (tools/triton_compile.py writes it):
//   <name>.cubin  machine code (preferred),
//   <name>.ptx    the same kernel as PTX (fallback, JIT-compiled by the driver),
//   <name>.json   metadata: name, num_warps, num_ctas, shared, global/profile scratch size and
//                 alignment, launch_pdl, launch_cooperative_grid, triton_version, target
//                 {backend, arch, warp_size}; optionally signature/arg_names (the run-time
//                 parameter types, as written by tools/triton_compile.py) and cubin_sha256 /
//                 ptx_sha256. Triton's own cache JSON (~/.triton/cache/*/<kernel>.json) is
//                 accepted too: it has every required field.
//
// Calling convention, as Triton 3.6's own launcher (triton/backends/nvidia/driver.py,
// make_launcher and CudaLauncher) does it:
//   * parameters in the kernel's declaration order, constexpr parameters left out (folded into
//     the code), scalars by value (fp32 as its 4 bytes, i32 as 4, pointers as 8);
//   * then two trailing pointers, global_scratch and profile_scratch: null when the metadata's
//     size is 0, else grid_x*grid_y*grid_z*num_ctas*size bytes aligned to the metadata's align;
//   * block = 32*num_warps threads, grid.x multiplied by num_ctas (with a cluster of num_ctas),
//     dynamic shared memory = metadata.shared, opted in above 48 KB;
//   * launch attributes for launch_pdl and launch_cooperative_grid; an empty grid launches
//     nothing.
// The loader checks the cubin's and PTX's own parameter tables against that convention.
//
// Life cycle: TritonKernel::Create checks everything that needs no GPU (metadata fields and
// version, the code's architecture against the metadata's target, the code's parameter list
// against the metadata's signature and the caller's mapping, the digests). Load() then goes to
// the CUDA driver (libcuda.so.1, opened at run time, so binaries link and start on machines
// without one), and Launch() enqueues on a stream.
#ifndef CONV2D_CONV_TRITON_TRITON_KERNEL_H_
#define CONV2D_CONV_TRITON_TRITON_KERNEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "conv/triton/embedded.h"
#include "conv/triton/metadata.h"

typedef struct CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime.h

namespace conv2d {
namespace triton {

// One kernel's artifacts, owned. `cubin` or `ptx` may be empty, not both.
struct KernelImage {
  std::string label;  // names the kernel in errors, e.g. "igemm_conv_m128_n64"
  std::string cubin;
  std::string ptx;
  std::string metadata_json;
};

// <base>.json and whichever of <base>.cubin / <base>.ptx exist, from embedded files...
absl::StatusOr<KernelImage> ImageFromEmbedded(const EmbeddedFiles& files, absl::string_view base);
// ...or from disk: <path_prefix>.json, .cubin, .ptx.
absl::StatusOr<KernelImage> ReadKernelImage(const std::string& path_prefix);

// The arguments of one launch, in the kernel's run-time parameter order (no constexprs, no
// scratch pointers: those the loader adds).
class KernelArgs {
 public:
  KernelArgs& Pointer(const void* p);
  KernelArgs& I32(int32_t v);
  KernelArgs& I64(int64_t v);
  KernelArgs& U32(uint32_t v);
  KernelArgs& U64(uint64_t v);
  KernelArgs& F32(float v);
  KernelArgs& F64(double v);
  // Any other scalar, as its storage bits (fp16/bf16 bits; i1/i8/i16/u8/u16 values).
  KernelArgs& Raw(ArgType type, uint64_t bits);

  size_t size() const { return types_.size(); }
  const std::vector<ArgType>& types() const { return types_; }

 private:
  friend class TritonKernel;
  std::vector<ArgType> types_;
  std::vector<uint64_t> slots_;  // one 8-byte slot per argument, value in its low bytes
};

struct Grid {
  uint32_t x = 1, y = 1, z = 1;
};

// Which code Load() uses.
enum class CodeChoice {
  kCubinThenPtx,  // the cubin if it runs on the device, else (or if the driver refuses it) PTX
  kCubinOnly,
  kPtxOnly,
};

class TritonKernel {
 public:
  // Checks `image` without touching the driver. `expected` is the caller's mapping: the types
  // it will pass, in order. It must equal the metadata's signature (when present) and agree
  // with the parameter tables of the cubin and PTX (plus the two scratch pointers).
  static absl::StatusOr<std::unique_ptr<TritonKernel>> Create(KernelImage image,
                                                              absl::Span<const ArgType> expected);
  ~TritonKernel();
  TritonKernel(const TritonKernel&) = delete;
  TritonKernel& operator=(const TritonKernel&) = delete;

  const KernelMetadata& metadata() const { return metadata_; }
  const std::string& label() const { return image_.label; }
  int block_threads() const { return 32 * metadata_.num_warps; }

  // No driver: whether this kernel's code runs on compute capability `cc` (major*10+minor),
  // under `choice`.
  absl::Status CheckDeviceArch(int cc, CodeChoice choice = CodeChoice::kCubinThenPtx) const;
  // No driver: `args` against the signature (count and types).
  absl::Status CheckArgs(const KernelArgs& args) const;
  // No driver: the grid's limits (y and z <= 65535, x*num_ctas < 2^31).
  absl::Status CheckGrid(Grid grid) const;
  // Workspace bytes a launch on `grid` needs for Triton's scratch buffers (0 for most
  // kernels), alignment slack included, so any pointer may be passed to Launch.
  size_t ScratchBytes(Grid grid) const;

  // Loads the code into the primary context of `device` (the context the CUDA runtime uses;
  // -1: the current context's device, else device 0) and opts in to the dynamic shared memory
  // the kernel needs. Fails with FailedPrecondition "no CUDA driver" where libcuda.so.1 is
  // absent.
  absl::Status Load(int device = -1, CodeChoice choice = CodeChoice::kCubinThenPtx);
  bool loaded() const;
  // "cubin" or "ptx": what Load() used.
  const char* loaded_code() const;

  // Enqueues the kernel on `stream` (a CUDA runtime stream is a driver CUstream).
  absl::Status Launch(Grid grid, const KernelArgs& args, void* scratch, size_t scratch_bytes,
                      cudaStream_t stream) const;

 private:
  struct Loaded;
  TritonKernel(KernelImage image, KernelMetadata metadata, std::vector<ArgType> signature);
  // The device addresses of the global and profile scratch slices within `scratch` (at least
  // ScratchBytes(grid) bytes) for a launch on `grid`; 0 for a buffer of size 0.
  void SliceScratch(Grid grid, void* scratch, uint64_t* global, uint64_t* profile) const;

  KernelImage image_;
  KernelMetadata metadata_;
  std::vector<ArgType> signature_;
  std::unique_ptr<Loaded> loaded_;
};

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_TRITON_KERNEL_H_
