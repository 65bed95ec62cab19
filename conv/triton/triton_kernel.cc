#include "conv/triton/triton_kernel.h"

#include <cuda.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "conv/triton/cuda_driver.h"
#include "conv/triton/json.h"
#include "conv/triton/kernel_binary.h"
#include "conv/triton/sha256.h"

namespace conv2d {
namespace triton {

// ---------------------------------------------------------------------------------------------
// Types and versions.

absl::StatusOr<ArgType> ParseArgType(absl::string_view t) {
  if (absl::StartsWith(t, "*")) return ArgType::kPointer;
  static const struct {
    const char* name;
    ArgType type;
  } kTypes[] = {{"i1", ArgType::kI1},     {"i8", ArgType::kI8},     {"i16", ArgType::kI16},
                {"i32", ArgType::kI32},   {"i64", ArgType::kI64},   {"u1", ArgType::kU1},
                {"u8", ArgType::kU8},     {"u16", ArgType::kU16},   {"u32", ArgType::kU32},
                {"u64", ArgType::kU64},   {"fp16", ArgType::kFp16}, {"bf16", ArgType::kBf16},
                {"fp32", ArgType::kFp32}, {"f32", ArgType::kFp32},  {"fp64", ArgType::kFp64}};
  for (const auto& k : kTypes) {
    if (t == k.name) return k.type;
  }
  if (t == "constexpr") {
    return absl::InvalidArgumentError(
        "'constexpr' in a run-time signature: constexpr parameters are folded into the code and "
        "must be left out");
  }
  if (absl::StartsWith(t, "tensordesc") || t == "nvTmaDesc") {
    return absl::UnimplementedError(absl::StrCat(
        "parameter type '", t, "': tensor descriptors (host-side TMA) are not supported"));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown Triton parameter type '", t, "'"));
}

std::string ArgTypeName(ArgType type) {
  switch (type) {
    case ArgType::kPointer: return "*";
    case ArgType::kI1: return "i1";
    case ArgType::kI8: return "i8";
    case ArgType::kI16: return "i16";
    case ArgType::kI32: return "i32";
    case ArgType::kI64: return "i64";
    case ArgType::kU1: return "u1";
    case ArgType::kU8: return "u8";
    case ArgType::kU16: return "u16";
    case ArgType::kU32: return "u32";
    case ArgType::kU64: return "u64";
    case ArgType::kFp16: return "fp16";
    case ArgType::kBf16: return "bf16";
    case ArgType::kFp32: return "fp32";
    case ArgType::kFp64: return "fp64";
  }
  return "?";
}

int ArgTypeSize(ArgType type) {
  // driver.py ty_to_cpp: pointers CUdeviceptr; i1/i8 int8_t, u1/u8 uint8_t; floats travel as
  // their storage type (FLOAT_STORAGE_TYPE: fp16/bf16 uint16_t, fp32 uint32_t, fp64 uint64_t).
  switch (type) {
    case ArgType::kPointer: return 8;
    case ArgType::kI1: case ArgType::kI8: case ArgType::kU1: case ArgType::kU8: return 1;
    case ArgType::kI16: case ArgType::kU16: case ArgType::kFp16: case ArgType::kBf16: return 2;
    case ArgType::kI32: case ArgType::kU32: case ArgType::kFp32: return 4;
    case ArgType::kI64: case ArgType::kU64: case ArgType::kFp64: return 8;
  }
  return 0;
}

bool IsSupportedTritonVersion(absl::string_view version) {
  // Checked against triton==3.6.0's triton/backends/nvidia/driver.py: make_launcher appends
  // &global_scratch and &profile_scratch after the non-constexpr arguments (lines 260-262);
  // CudaLauncher sizes each scratch as grid*num_ctas*size (lines 702-708). Other versions may
  // differ (the profile_scratch pointer is recent), so they are refused until checked.
  static const char* kSupported[] = {"3.6"};
  std::vector<absl::string_view> parts = absl::StrSplit(version, '.');
  if (parts.size() < 2) return false;
  int major = 0, minor = 0;
  if (!absl::SimpleAtoi(parts[0], &major) || !absl::SimpleAtoi(parts[1], &minor)) return false;
  const std::string mm = absl::StrCat(major, ".", minor);
  for (const char* s : kSupported) {
    if (mm == s) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Metadata.

namespace {

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("metadata: field '", field, "' ", what));
}

absl::StatusOr<const JsonValue*> Field(const JsonValue& obj, absl::string_view key,
                                       JsonValue::Kind kind, bool required) {
  const JsonValue* v = obj.Find(key);
  if (v == nullptr || (!required && v->is_null())) {
    if (required) return FieldError(key, "is missing");
    return nullptr;
  }
  if (v->kind() != kind) {
    return FieldError(key, absl::StrCat("must be ", JsonValue::KindName(kind), ", not ",
                                        JsonValue::KindName(v->kind())));
  }
  return v;
}

absl::Status GetInt(const JsonValue& obj, absl::string_view key, bool required, int64_t lo,
                    int64_t hi, int64_t* out) {
  const JsonValue* v = obj.Find(key);
  if (v == nullptr || (!required && v->is_null())) {
    return required ? FieldError(key, "is missing") : absl::OkStatus();
  }
  if (!v->is_integer()) {
    return FieldError(key, absl::StrCat("must be an integer, not ",
                                        v->is_number() ? "a fraction" : JsonValue::KindName(v->kind())));
  }
  if (v->integer() < lo || v->integer() > hi) {
    return FieldError(key, absl::StrCat("is ", v->integer(), ", outside [", lo, ", ", hi, "]"));
  }
  *out = v->integer();
  return absl::OkStatus();
}

absl::Status GetBool(const JsonValue& obj, absl::string_view key, bool* out) {
  auto v = Field(obj, key, JsonValue::Kind::kBool, true);
  if (!v.ok()) return v.status();
  *out = (*v)->bool_value();
  return absl::OkStatus();
}

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

std::string SignatureString(absl::Span<const ArgType> types) {
  return absl::StrJoin(types, ",", [](std::string* out, ArgType t) {
    out->append(t == ArgType::kPointer ? "*" : ArgTypeName(t));
  });
}

}  // namespace

absl::StatusOr<KernelMetadata> ParseMetadata(absl::string_view json) {
  auto doc = ParseJson(json);
  if (!doc.ok()) return absl::InvalidArgumentError(absl::StrCat("metadata: ", doc.status().message()));
  if (!doc->is_object()) return absl::InvalidArgumentError("metadata: not a JSON object");
  const JsonValue& o = *doc;
  KernelMetadata m;

  // The version first: fields of an unknown version mean nothing.
  auto version = Field(o, "triton_version", JsonValue::Kind::kString, true);
  if (!version.ok()) return version.status();
  m.triton_version = (*version)->string();
  if (!IsSupportedTritonVersion(m.triton_version)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "metadata: compiled by Triton ", m.triton_version,
        ", but this loader implements the launch convention of Triton 3.6 only (checked against "
        "its launcher, triton/backends/nvidia/driver.py); recompile with triton==3.6.0 "
        "(tools/triton_compile.py)"));
  }

  auto name = Field(o, "name", JsonValue::Kind::kString, true);
  if (!name.ok()) return name.status();
  m.name = (*name)->string();
  if (m.name.empty()) return FieldError("name", "is empty");

  int64_t v = 0;
  constexpr int64_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMax64 = int64_t{1} << 40;  // far above any real scratch size
  absl::Status s = GetInt(o, "num_warps", true, 1, 32, &v);
  if (!s.ok()) return s;
  if (!IsPowerOfTwo(v)) return FieldError("num_warps", "must be a power of two");
  m.num_warps = static_cast<int>(v);
  v = 1;
  if (!(s = GetInt(o, "num_ctas", false, 1, 16, &v)).ok()) return s;
  m.num_ctas = static_cast<int>(v);
  if (!(s = GetInt(o, "shared", true, 0, kMax32, &v)).ok()) return s;
  m.shared = static_cast<int>(v);
  if (!(s = GetInt(o, "global_scratch_size", true, 0, kMax64, &m.global_scratch_size)).ok()) {
    return s;
  }
  if (!(s = GetInt(o, "global_scratch_align", true, 1, 4096, &m.global_scratch_align)).ok()) {
    return s;
  }
  if (!IsPowerOfTwo(m.global_scratch_align)) {
    return FieldError("global_scratch_align", "must be a power of two");
  }
  if (!(s = GetInt(o, "profile_scratch_size", true, 0, kMax64, &m.profile_scratch_size)).ok()) {
    return s;
  }
  if (!(s = GetInt(o, "profile_scratch_align", false, 1, 4096, &m.profile_scratch_align)).ok()) {
    return s;
  }
  if (!IsPowerOfTwo(m.profile_scratch_align)) {
    return FieldError("profile_scratch_align", "must be a power of two");
  }
  if (!(s = GetBool(o, "launch_pdl", &m.launch_pdl)).ok()) return s;
  if (!(s = GetBool(o, "launch_cooperative_grid", &m.launch_cooperative_grid)).ok()) return s;

  auto target = Field(o, "target", JsonValue::Kind::kObject, true);
  if (!target.ok()) return target.status();
  auto backend = Field(**target, "backend", JsonValue::Kind::kString, true);
  if (!backend.ok()) return FieldError("target", std::string(backend.status().message()));
  m.target_backend = (*backend)->string();
  if (m.target_backend != "cuda") {
    return FieldError("target", absl::StrCat("has backend '", m.target_backend, "', not 'cuda'"));
  }
  if (!(s = GetInt(**target, "arch", true, 20, 199, &v)).ok()) {
    return FieldError("target", std::string(s.message()));
  }
  m.target_arch = static_cast<int>(v);
  if (!(s = GetInt(**target, "warp_size", true, 1, 1024, &v)).ok()) {
    return FieldError("target", std::string(s.message()));
  }
  m.warp_size = static_cast<int>(v);
  if (m.warp_size != 32) return FieldError("target", "has a warp size other than 32");

  // Host-side tensor descriptors change the parameter list (driver.py _expand_signature).
  if (const JsonValue* td = o.Find("tensordesc_meta"); td != nullptr && td->is_array() &&
                                                         !td->array().empty()) {
    return absl::UnimplementedError(
        "metadata: the kernel takes tensor descriptors (tensordesc_meta), which this loader does "
        "not support");
  }

  auto signature = Field(o, "signature", JsonValue::Kind::kArray, false);
  if (!signature.ok()) return signature.status();
  if (*signature != nullptr) {
    m.has_signature = true;
    for (const JsonValue& t : (*signature)->array()) {
      if (!t.is_string()) return FieldError("signature", "must hold strings");
      auto type = ParseArgType(t.string());
      if (!type.ok()) return FieldError("signature", std::string(type.status().message()));
      m.signature.push_back(*type);
    }
    auto names = Field(o, "arg_names", JsonValue::Kind::kArray, false);
    if (!names.ok()) return names.status();
    if (*names != nullptr) {
      for (const JsonValue& n : (*names)->array()) {
        if (!n.is_string()) return FieldError("arg_names", "must hold strings");
        m.arg_names.push_back(n.string());
      }
      if (m.arg_names.size() != m.signature.size()) {
        return FieldError("arg_names", "and 'signature' differ in length");
      }
    }
  }
  auto constexprs = Field(o, "constexprs", JsonValue::Kind::kObject, false);
  if (!constexprs.ok()) return constexprs.status();
  if (*constexprs != nullptr) {
    for (const auto& member : (*constexprs)->object()) {
      if (member.second.is_integer()) {
        m.constexprs.emplace_back(member.first, member.second.integer());
      } else if (member.second.is_bool()) {
        m.constexprs.emplace_back(member.first, member.second.bool_value() ? 1 : 0);
      }
    }
  }
  for (const char* key : {"cubin_sha256", "ptx_sha256"}) {
    auto digest = Field(o, key, JsonValue::Kind::kString, false);
    if (!digest.ok()) return digest.status();
    if (*digest == nullptr) continue;
    const std::string& d = (*digest)->string();
    if (d.size() != 64 || d.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return FieldError(key, "is not 64 lower-case hex digits");
    }
    (std::string(key) == "cubin_sha256" ? m.cubin_sha256 : m.ptx_sha256) = d;
  }
  return m;
}

absl::StatusOr<int64_t> KernelMetadata::Constexpr(absl::string_view key) const {
  for (const auto& c : constexprs) {
    if (c.first == key) return c.second;
  }
  return absl::NotFoundError(absl::StrCat("metadata of '", name, "' records no integer constexpr '",
                                          key, "'"));
}

// ---------------------------------------------------------------------------------------------
// Images.

absl::StatusOr<KernelImage> ImageFromEmbedded(const EmbeddedFiles& files, absl::string_view base) {
  KernelImage image;
  image.label = std::string(base);
  auto get = [&](const char* ext, std::string* out) {
    const EmbeddedFile* f = files.Find(absl::StrCat(base, ext));
    if (f == nullptr) return false;
    out->assign(reinterpret_cast<const char*>(f->data), f->size);
    return true;
  };
  if (!get(".json", &image.metadata_json)) {
    return absl::NotFoundError(absl::StrCat("no embedded ", base, ".json"));
  }
  const bool cubin = get(".cubin", &image.cubin);
  const bool ptx = get(".ptx", &image.ptx);
  if (!cubin && !ptx) {
    return absl::NotFoundError(absl::StrCat("no embedded ", base, ".cubin or ", base, ".ptx"));
  }
  return image;
}

absl::StatusOr<KernelImage> ReadKernelImage(const std::string& path_prefix) {
  KernelImage image;
  const size_t slash = path_prefix.find_last_of('/');
  image.label = slash == std::string::npos ? path_prefix : path_prefix.substr(slash + 1);
  auto read = [](const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return !in.bad();
  };
  if (!read(path_prefix + ".json", &image.metadata_json)) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path_prefix, ".json"));
  }
  const bool cubin = read(path_prefix + ".cubin", &image.cubin);
  const bool ptx = read(path_prefix + ".ptx", &image.ptx);
  if (!cubin && !ptx) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path_prefix, ".cubin or ", path_prefix, ".ptx"));
  }
  return image;
}

// ---------------------------------------------------------------------------------------------
// Arguments.

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

// ---------------------------------------------------------------------------------------------
// TritonKernel: checks without the driver.

namespace {

// The parameter table a Triton 3.6 kernel with run-time signature `sig` must have.
std::vector<int> ExpectedParamSizes(absl::Span<const ArgType> sig) {
  std::vector<int> sizes;
  for (ArgType t : sig) sizes.push_back(ArgTypeSize(t));
  sizes.push_back(8);  // global_scratch
  sizes.push_back(8);  // profile_scratch
  return sizes;
}

absl::Status CheckParamTable(absl::string_view label, const char* code,
                             const std::vector<int>& found, absl::Span<const ArgType> sig) {
  const std::vector<int> want = ExpectedParamSizes(sig);
  if (found == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      label, ": the ", code, "'s kernel takes ", found.size(), " parameters of sizes [",
      absl::StrJoin(found, ","), "] bytes, but the signature (", SignatureString(sig),
      ") plus Triton's two trailing scratch pointers needs ", want.size(), " of sizes [",
      absl::StrJoin(want, ","), "]: the artifacts and the argument mapping disagree"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TritonKernel>> TritonKernel::Create(
    KernelImage image, absl::Span<const ArgType> expected) {
  const std::string& label = image.label;
  auto prefix = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(label, ": ", s.message()));
  };
  auto metadata = ParseMetadata(image.metadata_json);
  if (!metadata.ok()) return prefix(metadata.status());
  const KernelMetadata& m = *metadata;
  if (image.cubin.empty() && image.ptx.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": neither a cubin nor PTX"));
  }

  // The caller's mapping against the metadata's signature.
  if (m.has_signature) {
    if (expected.size() != m.signature.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": the kernel takes ", m.signature.size(), " run-time arguments (",
          m.arg_names.empty() ? SignatureString(m.signature) : absl::StrJoin(m.arg_names, ", "),
          ") but the argument mapping passes ", expected.size()));
    }
    for (size_t i = 0; i < expected.size(); ++i) {
      if (expected[i] != m.signature[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            label, ": argument ", i,
            m.arg_names.empty() ? "" : absl::StrCat(" ('", m.arg_names[i], "')"), " is ",
            ArgTypeName(m.signature[i]), " in the kernel but ", ArgTypeName(expected[i]),
            " in the argument mapping"));
      }
    }
  }

  // Digests tie the metadata to the code it was written with.
  if (!image.cubin.empty() && !m.cubin_sha256.empty() &&
      Sha256Hex(image.cubin) != m.cubin_sha256) {
    return absl::DataLossError(absl::StrCat(
        label, ": the cubin's SHA-256 differs from the metadata's cubin_sha256: corrupt, or "
               "not the cubin this metadata was written for"));
  }
  if (!image.ptx.empty() && !m.ptx_sha256.empty() && Sha256Hex(image.ptx) != m.ptx_sha256) {
    return absl::DataLossError(absl::StrCat(
        label, ": the PTX's SHA-256 differs from the metadata's ptx_sha256: corrupt, or not the "
               "PTX this metadata was written for"));
  }

  if (!image.cubin.empty()) {
    auto cubin = InspectCubin(image.cubin, m.name);
    if (!cubin.ok()) return prefix(cubin.status());
    if (cubin->arch.sm != m.target_arch) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": the cubin is for ", cubin->arch.ToString(), " but the metadata's target is "
          "arch ", m.target_arch, ": mismatched artifacts"));
    }
    absl::Status s = CheckParamTable(label, "cubin", cubin->param_sizes, expected);
    if (!s.ok()) return s;
  }
  if (!image.ptx.empty()) {
    auto ptx = InspectPtx(image.ptx, m.name);
    if (!ptx.ok()) return prefix(ptx.status());
    if (ptx->arch.sm != m.target_arch) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": the PTX targets ", ptx->arch.ToString(), " but the metadata's target is arch ",
          m.target_arch, ": mismatched artifacts"));
    }
    absl::Status s = CheckParamTable(label, "PTX", ptx->param_sizes, expected);
    if (!s.ok()) return s;
  }
  std::vector<ArgType> signature(expected.begin(), expected.end());
  return std::unique_ptr<TritonKernel>(
      new TritonKernel(std::move(image), std::move(*metadata), std::move(signature)));
}

TritonKernel::TritonKernel(KernelImage image, KernelMetadata metadata,
                           std::vector<ArgType> signature)
    : image_(std::move(image)), metadata_(std::move(metadata)), signature_(std::move(signature)) {}

absl::Status TritonKernel::CheckDeviceArch(int cc, CodeChoice choice) const {
  std::vector<std::string> why;
  // The architecture comes from the code itself (checked equal to the metadata's in Create).
  if (choice != CodeChoice::kPtxOnly) {
    if (image_.cubin.empty()) {
      why.push_back("no cubin");
    } else {
      auto info = InspectCubin(image_.cubin, metadata_.name);
      if (!info.ok()) return info.status();
      absl::Status s = CheckArchRunsOn(info->arch, /*is_ptx=*/false, cc);
      if (s.ok()) return s;
      why.push_back(std::string(s.message()));
    }
  }
  if (choice != CodeChoice::kCubinOnly) {
    if (image_.ptx.empty()) {
      why.push_back("no PTX");
    } else {
      auto info = InspectPtx(image_.ptx, metadata_.name);
      if (!info.ok()) return info.status();
      absl::Status s = CheckArchRunsOn(info->arch, /*is_ptx=*/true, cc);
      if (s.ok()) return s;
      why.push_back(std::string(s.message()));
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat(label(), ": no code for this device: ", absl::StrJoin(why, "; ")));
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

// ---------------------------------------------------------------------------------------------
// TritonKernel: the driver.

struct TritonKernel::Loaded {
  const CudaDriver* driver = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;  // the device's primary context, retained
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  const char* code = "";
};

namespace {

// Makes `ctx` current for the scope if it is not already.
class ScopedContext {
 public:
  ScopedContext(const CudaDriver* d, CUcontext ctx) : d_(d) {
    CUcontext current = nullptr;
    status_ = d_->Check(d_->CtxGetCurrent(&current), "cuCtxGetCurrent");
    if (status_.ok() && current != ctx) {
      status_ = d_->Check(d_->CtxPushCurrent(ctx), "cuCtxPushCurrent");
      pushed_ = status_.ok();
    }
  }
  ~ScopedContext() {
    if (pushed_) {
      CUcontext popped;
      (void)d_->CtxPopCurrent(&popped);
    }
  }
  const absl::Status& status() const { return status_; }

 private:
  const CudaDriver* d_;
  absl::Status status_;
  bool pushed_ = false;
};

}  // namespace

TritonKernel::~TritonKernel() {
  if (loaded_ == nullptr) return;
  const CudaDriver* d = loaded_->driver;
  // Errors are ignored: at process exit the driver may already be shut down.
  if (loaded_->module != nullptr) {
    ScopedContext scope(d, loaded_->context);
    if (scope.status().ok()) (void)d->ModuleUnload(loaded_->module);
  }
  if (loaded_->context != nullptr) (void)d->DevicePrimaryCtxRelease(loaded_->device);
}

bool TritonKernel::loaded() const { return loaded_ != nullptr; }

const char* TritonKernel::loaded_code() const { return loaded_ ? loaded_->code : ""; }

namespace {

// cuModuleLoadDataEx with the JIT's error log captured (PTX), so failures say why.
absl::Status LoadModule(const CudaDriver* d, const std::string& code, const char* what,
                        CUmodule* module) {
  char log[8192] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(log) - 1))};
  // std::string's buffer is NUL-terminated, as PTX text must be.
  absl::Status s = d->Check(d->ModuleLoadDataEx(module, code.c_str(), 2, options, values),
                            absl::StrCat("cuModuleLoadDataEx (", what, ")").c_str());
  if (!s.ok() && log[0] != '\0') {
    return absl::Status(s.code(), absl::StrCat(s.message(), ": ", log));
  }
  return s;
}

}  // namespace

absl::Status TritonKernel::Load(int device, CodeChoice choice) {
  if (loaded_ != nullptr) return absl::FailedPreconditionError(label() + ": already loaded");
  auto driver = GetCudaDriver();
  if (!driver.ok()) {
    return absl::Status(driver.status().code(),
                        absl::StrCat(label(), ": ", driver.status().message()));
  }
  const CudaDriver* d = *driver;
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(label(), ": ", s.message()));
  };

  auto l = std::make_unique<Loaded>();
  l->driver = d;
  if (device < 0) {
    CUcontext current = nullptr;
    absl::Status s = d->Check(d->CtxGetCurrent(&current), "cuCtxGetCurrent");
    if (!s.ok()) return fail(s);
    if (current != nullptr) {
      s = d->Check(d->CtxGetDevice(&l->device), "cuCtxGetDevice");
      if (!s.ok()) return fail(s);
    } else {
      s = d->Check(d->DeviceGet(&l->device, 0), "cuDeviceGet(0)");
      if (!s.ok()) return fail(s);
    }
  } else {
    absl::Status s = d->Check(d->DeviceGet(&l->device, device), "cuDeviceGet");
    if (!s.ok()) return fail(s);
  }
  int major = 0, minor = 0;
  absl::Status s = d->Check(
      d->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, l->device),
      "cuDeviceGetAttribute(compute capability)");
  if (s.ok()) {
    s = d->Check(
        d->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, l->device),
        "cuDeviceGetAttribute(compute capability)");
  }
  if (!s.ok()) return fail(s);
  const int cc = major * 10 + minor;
  s = CheckDeviceArch(cc, choice);
  if (!s.ok()) return s;

  s = d->Check(d->DevicePrimaryCtxRetain(&l->context, l->device), "cuDevicePrimaryCtxRetain");
  if (!s.ok()) return fail(s);
  auto release = [&] {
    if (l->module != nullptr) (void)d->ModuleUnload(l->module);
    (void)d->DevicePrimaryCtxRelease(l->device);
  };
  {
    ScopedContext scope(d, l->context);
    if (!scope.status().ok()) {
      release();
      return fail(scope.status());
    }
    // The cubin when it runs here (a cubin the driver refuses falls back to PTX), else PTX.
    std::vector<std::string> errors;
    const bool try_cubin = choice != CodeChoice::kPtxOnly && !image_.cubin.empty() &&
                           CheckDeviceArch(cc, CodeChoice::kCubinOnly).ok();
    const bool try_ptx = choice != CodeChoice::kCubinOnly && !image_.ptx.empty() &&
                         CheckDeviceArch(cc, CodeChoice::kPtxOnly).ok();
    if (try_cubin) {
      s = LoadModule(d, image_.cubin, "cubin", &l->module);
      if (s.ok()) {
        l->code = "cubin";
      } else {
        errors.push_back(std::string(s.message()));
        l->module = nullptr;
      }
    }
    if (l->module == nullptr && try_ptx) {
      s = LoadModule(d, image_.ptx, "PTX", &l->module);
      if (s.ok()) {
        l->code = "ptx";
      } else {
        errors.push_back(std::string(s.message()));
        l->module = nullptr;
      }
    }
    if (l->module == nullptr) {
      release();
      return absl::InternalError(
          absl::StrCat(label(), ": cannot load: ", absl::StrJoin(errors, "; ")));
    }
    s = d->Check(d->ModuleGetFunction(&l->function, l->module, metadata_.name.c_str()),
                 "cuModuleGetFunction");
    // Dynamic shared memory above 48 KB needs an opt-in, as Triton's loadBinary does
    // (triton/backends/nvidia/driver.c: shared > 49152 -> prefer shared, and allow
    // opt-in maximum minus the kernel's static shared memory).
    int max_threads = 0, shared_static = 0, optin = 0;
    if (s.ok()) {
      s = d->Check(d->FuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                       l->function),
                   "cuFuncGetAttribute(max threads)");
    }
    if (s.ok()) {
      s = d->Check(d->FuncGetAttribute(&shared_static, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                       l->function),
                   "cuFuncGetAttribute(static shared)");
    }
    if (s.ok()) {
      s = d->Check(d->DeviceGetAttribute(
                       &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, l->device),
                   "cuDeviceGetAttribute(shared opt-in)");
    }
    if (s.ok() && block_threads() > max_threads) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "num_warps ", metadata_.num_warps, " needs ", block_threads(),
          " threads per block; the loaded kernel allows ", max_threads));
    }
    if (s.ok() && metadata_.shared + shared_static > optin) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "the kernel needs ", metadata_.shared, " bytes of dynamic shared memory (+",
          shared_static, " static); this device allows ", optin, " per block"));
    }
    if (s.ok() && metadata_.shared > 49152) {
      s = d->Check(d->FuncSetCacheConfig(l->function, CU_FUNC_CACHE_PREFER_SHARED),
                   "cuFuncSetCacheConfig");
      if (s.ok()) {
        s = d->Check(d->FuncSetAttribute(l->function,
                                         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         optin - shared_static),
                     "cuFuncSetAttribute(max dynamic shared memory)");
      }
    }
    if (s.ok() && metadata_.num_ctas == 16) {
      s = d->Check(d->FuncSetAttribute(l->function,
                                       CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                   "cuFuncSetAttribute(non-portable cluster size)");
    }
    if (!s.ok()) {
      release();
      return fail(s);
    }
  }
  loaded_ = std::move(l);
  return absl::OkStatus();
}

absl::Status TritonKernel::Launch(Grid grid, const KernelArgs& args, void* scratch,
                                  size_t scratch_bytes, cudaStream_t stream) const {
  absl::Status s = CheckArgs(args);
  if (!s.ok()) return s;
  s = CheckGrid(grid);
  if (!s.ok()) return s;
  const size_t needed = ScratchBytes(grid);
  if (needed > 0 && (scratch == nullptr || scratch_bytes < needed)) {
    return absl::InvalidArgumentError(absl::StrCat(label(), ": needs ", needed,
                                                   " bytes of scratch, ", scratch_bytes,
                                                   " given"));
  }
  if (loaded_ == nullptr) {
    return absl::FailedPreconditionError(label() + ": Launch before a successful Load");
  }
  // driver.py _launch (line 318): an empty grid launches nothing.
  if (uint64_t{grid.x} * grid.y * grid.z == 0) return absl::OkStatus();

  // Scratch slices, as CudaLauncher allocates them: null when the size is 0.
  CUdeviceptr global_scratch = 0, profile_scratch = 0;
  uintptr_t cursor = reinterpret_cast<uintptr_t>(scratch);
  if (metadata_.global_scratch_size > 0) {
    cursor = AlignUp(cursor, static_cast<size_t>(metadata_.global_scratch_align));
    global_scratch = cursor;
    cursor += size_t{grid.x} * grid.y * grid.z * metadata_.num_ctas *
              static_cast<size_t>(metadata_.global_scratch_size);
  }
  if (metadata_.profile_scratch_size > 0) {
    cursor = AlignUp(cursor, static_cast<size_t>(metadata_.profile_scratch_align));
    profile_scratch = cursor;
  }

  // driver.py make_launcher: params = [&arg_i for non-constexpr i] + [&global_scratch,
  // &profile_scratch] (lines 260-262).
  std::vector<void*> params;
  params.reserve(args.size() + 2);
  for (const uint64_t& slot : args.slots_) params.push_back(const_cast<uint64_t*>(&slot));
  params.push_back(&global_scratch);
  params.push_back(&profile_scratch);

  // driver.py _launch (lines 316-377).
  CUlaunchAttribute attrs[4];
  unsigned num_attrs = 0;
  if (metadata_.launch_pdl) {
    attrs[num_attrs] = {};
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[num_attrs].value.programmaticStreamSerializationAllowed = 1;
    ++num_attrs;
  }
  if (metadata_.launch_cooperative_grid) {
    attrs[num_attrs] = {};
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[num_attrs].value.cooperative = 1;
    ++num_attrs;
  }
  if (metadata_.num_ctas != 1) {
    attrs[num_attrs] = {};
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[num_attrs].value.clusterDim.x = static_cast<unsigned>(metadata_.num_ctas);
    attrs[num_attrs].value.clusterDim.y = 1;
    attrs[num_attrs].value.clusterDim.z = 1;
    ++num_attrs;
    attrs[num_attrs] = {};
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attrs[num_attrs].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    ++num_attrs;
  }
  CUlaunchConfig config = {};
  config.gridDimX = grid.x * static_cast<unsigned>(metadata_.num_ctas);
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = static_cast<unsigned>(block_threads());
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(metadata_.shared);
  config.hStream = reinterpret_cast<CUstream>(stream);
  config.attrs = num_attrs ? attrs : nullptr;
  config.numAttrs = num_attrs;

  const CudaDriver* d = loaded_->driver;
  ScopedContext scope(d, loaded_->context);
  if (!scope.status().ok()) {
    return absl::Status(scope.status().code(), absl::StrCat(label(), ": ", scope.status().message()));
  }
  s = d->Check(d->LaunchKernelEx(&config, loaded_->function, params.data(), nullptr),
               "cuLaunchKernelEx");
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(label(), ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace triton
}  // namespace conv2d
