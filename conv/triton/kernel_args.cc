// What one launch passes: the arguments packed into 8-byte slots (as Triton's launcher passes
// them), their check against the kernel's signature, the grid's limits, and Triton's two scratch
// buffers (the bytes a launch needs and where each slice starts). No driver involved.
#include "conv/triton/triton_kernel.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace conv2d {
namespace triton {

namespace {
template <typename T>
uint64_t Bits(T v) {
  uint64_t slot = 0;
  std::memcpy(&slot, &v, sizeof(T));  // little-endian: the value sits in the slot's low bytes
  return slot;
}
}  // namespace

KernelArgs& KernelArgs::Pointer(const void* p) { return Raw(ArgType::kPointer, Bits(p)); }
KernelArgs& KernelArgs::I32(int32_t v) { return Raw(ArgType::kI32, Bits(v)); }
KernelArgs& KernelArgs::I64(int64_t v) { return Raw(ArgType::kI64, Bits(v)); }
KernelArgs& KernelArgs::U32(uint32_t v) { return Raw(ArgType::kU32, Bits(v)); }
KernelArgs& KernelArgs::U64(uint64_t v) { return Raw(ArgType::kU64, Bits(v)); }
KernelArgs& KernelArgs::F32(float v) { return Raw(ArgType::kFp32, Bits(v)); }
KernelArgs& KernelArgs::F64(double v) { return Raw(ArgType::kFp64, Bits(v)); }
KernelArgs& KernelArgs::Raw(ArgType type, uint64_t bits) {
  const int size = ArgTypeSize(type);
  if (size < 8) bits &= (uint64_t{1} << (8 * size)) - 1;
  types_.push_back(type);
  slots_.push_back(bits);
  return *this;
}

absl::Status TritonKernel::CheckArgs(const KernelArgs& args) const {
  auto name = [&](size_t i) {
    return i < metadata_.arg_names.size() ? absl::StrCat(" ('", metadata_.arg_names[i], "')")
                                          : std::string();
  };
  if (args.size() != signature_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        label(), ": the kernel takes ", signature_.size(), " arguments (",
        SignatureString(signature_), "), ", args.size(), " given (",
        SignatureString(args.types()), ")"));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (args.types()[i] != signature_[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          label(), ": argument ", i, name(i), " must be ", ArgTypeName(signature_[i]), ", got ",
          ArgTypeName(args.types()[i])));
    }
  }
  return absl::OkStatus();
}

absl::Status TritonKernel::CheckGrid(Grid grid) const {
  if (uint64_t{grid.x} * metadata_.num_ctas > uint64_t{std::numeric_limits<int32_t>::max()} ||
      grid.y > 65535 || grid.z > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        label(), ": grid (", grid.x, ", ", grid.y, ", ", grid.z,
        ") exceeds CUDA's limits (x*num_ctas < 2^31, y and z <= 65535)"));
  }
  return absl::OkStatus();
}

namespace {
// Bytes for one of Triton's scratch buffers: one slice of `size` per program (CudaLauncher's
// allocate_scratch: grid_size * num_ctas * size), plus slack to align any base pointer.
size_t ScratchPart(Grid grid, int num_ctas, int64_t size, int64_t align) {
  if (size == 0) return 0;
  const size_t programs = size_t{grid.x} * grid.y * grid.z * static_cast<size_t>(num_ctas);
  return programs * static_cast<size_t>(size) + static_cast<size_t>(align) - 1;
}

size_t AlignUp(size_t v, size_t align) { return (v + align - 1) / align * align; }
}  // namespace

size_t TritonKernel::ScratchBytes(Grid grid) const {
  return ScratchPart(grid, metadata_.num_ctas, metadata_.global_scratch_size,
                     metadata_.global_scratch_align) +
         ScratchPart(grid, metadata_.num_ctas, metadata_.profile_scratch_size,
                     metadata_.profile_scratch_align);
}

void TritonKernel::SliceScratch(Grid grid, void* scratch, uint64_t* global,
                                uint64_t* profile) const {
  // As CudaLauncher allocates them: null when the size is 0. ScratchBytes left the slack.
  *global = *profile = 0;
  uintptr_t cursor = reinterpret_cast<uintptr_t>(scratch);
  if (metadata_.global_scratch_size > 0) {
    cursor = AlignUp(cursor, static_cast<size_t>(metadata_.global_scratch_align));
    *global = cursor;
    cursor += size_t{grid.x} * grid.y * grid.z * metadata_.num_ctas *
              static_cast<size_t>(metadata_.global_scratch_size);
  }
  if (metadata_.profile_scratch_size > 0) {
    cursor = AlignUp(cursor, static_cast<size_t>(metadata_.profile_scratch_align));
    *profile = cursor;
  }
}

}  // namespace triton
}  // namespace conv2d
