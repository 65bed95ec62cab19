// Kernel metadata: the parameter types, the supported Triton versions, and ParseMetadata's
// field-by-field validation of the .json (json.h reads it) into KernelMetadata.
#include "conv/triton/metadata.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "conv/triton/json.h"

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

std::string SignatureString(absl::Span<const ArgType> types) {
  return absl::StrJoin(types, ",", [](std::string* out, ArgType t) {
    out->append(t == ArgType::kPointer ? "*" : ArgTypeName(t));
  });
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

// The kinds a field may be required to have.
enum class Kind { kBool, kString, kArray, kObject };

bool IsKind(const Json& v, Kind kind) {
  switch (kind) {
    case Kind::kBool: return v.is_boolean();
    case Kind::kString: return v.is_string();
    case Kind::kArray: return v.is_array();
    case Kind::kObject: return v.is_object();
  }
  return false;
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kBool: return "a boolean";
    case Kind::kString: return "a string";
    case Kind::kArray: return "an array";
    case Kind::kObject: return "an object";
  }
  return "?";
}

// The member `key` of `obj`: nullptr when it is optional and absent or null.
absl::StatusOr<const Json*> Member(const Json& obj, absl::string_view key, bool required) {
  const auto it = obj.find(std::string(key));
  if (it == obj.end() || (!required && it->is_null())) {
    if (required) return FieldError(key, "is missing");
    return nullptr;
  }
  return &*it;
}

absl::StatusOr<const Json*> Field(const Json& obj, absl::string_view key, Kind kind,
                                  bool required) {
  absl::StatusOr<const Json*> v = Member(obj, key, required);
  if (!v.ok() || *v == nullptr) return v;
  if (!IsKind(**v, kind)) {
    return FieldError(key, absl::StrCat("must be ", KindName(kind), ", not ", JsonKindName(**v)));
  }
  return v;
}

absl::Status GetInt(const Json& obj, absl::string_view key, bool required, int64_t lo,
                    int64_t hi, int64_t* out) {
  absl::StatusOr<const Json*> v = Member(obj, key, required);
  if (!v.ok() || *v == nullptr) return v.status();
  const Json& j = **v;
  if (!IsJsonInteger(j)) {
    return FieldError(key, absl::StrCat("must be an integer, not ",
                                        j.is_number() ? "a fraction" : JsonKindName(j)));
  }
  const int64_t value = j.get<int64_t>();
  if (value < lo || value > hi) {
    return FieldError(key, absl::StrCat("is ", value, ", outside [", lo, ", ", hi, "]"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status GetBool(const Json& obj, absl::string_view key, bool* out) {
  auto v = Field(obj, key, Kind::kBool, true);
  if (!v.ok()) return v.status();
  *out = (*v)->get<bool>();
  return absl::OkStatus();
}

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// <buffer>_scratch_size and its power-of-two <buffer>_scratch_align, for Triton's global and
// profile scratch buffers.
absl::Status GetScratch(const Json& o, absl::string_view buffer, bool align_required,
                        int64_t* size, int64_t* align) {
  constexpr int64_t kMaxSize = int64_t{1} << 40;  // far above any real scratch size
  const std::string size_key = absl::StrCat(buffer, "_scratch_size");
  const std::string align_key = absl::StrCat(buffer, "_scratch_align");
  absl::Status s = GetInt(o, size_key, true, 0, kMaxSize, size);
  if (s.ok()) s = GetInt(o, align_key, align_required, 1, 4096, align);
  if (s.ok() && !IsPowerOfTwo(*align)) s = FieldError(align_key, "must be a power of two");
  return s;
}

// The fields past the version and name: launch parameters and target.
absl::Status ParseLaunchFields(const Json& o, KernelMetadata& m) {
  int64_t v = 0;
  constexpr int64_t kMax32 = std::numeric_limits<int32_t>::max();
  absl::Status s = GetInt(o, "num_warps", true, 1, 32, &v);
  if (!s.ok()) return s;
  if (!IsPowerOfTwo(v)) return FieldError("num_warps", "must be a power of two");
  m.num_warps = static_cast<int>(v);
  v = 1;
  if (!(s = GetInt(o, "num_ctas", false, 1, 16, &v)).ok()) return s;
  m.num_ctas = static_cast<int>(v);
  if (!(s = GetInt(o, "shared", true, 0, kMax32, &v)).ok()) return s;
  m.shared = static_cast<int>(v);
  if (!(s = GetScratch(o, "global", true, &m.global_scratch_size, &m.global_scratch_align)).ok()) {
    return s;
  }
  if (!(s = GetScratch(o, "profile", false, &m.profile_scratch_size, &m.profile_scratch_align))
           .ok()) {
    return s;
  }
  if (!(s = GetBool(o, "launch_pdl", &m.launch_pdl)).ok()) return s;
  if (!(s = GetBool(o, "launch_cooperative_grid", &m.launch_cooperative_grid)).ok()) return s;

  auto target = Field(o, "target", Kind::kObject, true);
  if (!target.ok()) return target.status();
  auto backend = Field(**target, "backend", Kind::kString, true);
  if (!backend.ok()) return FieldError("target", backend.status().message());
  m.target_backend = (*backend)->get<std::string>();
  if (m.target_backend != "cuda") {
    return FieldError("target", absl::StrCat("has backend '", m.target_backend, "', not 'cuda'"));
  }
  if (!(s = GetInt(**target, "arch", true, 20, 199, &v)).ok()) {
    return FieldError("target", s.message());
  }
  m.target_arch = static_cast<int>(v);
  if (!(s = GetInt(**target, "warp_size", true, 1, 1024, &v)).ok()) {
    return FieldError("target", s.message());
  }
  m.warp_size = static_cast<int>(v);
  if (m.warp_size != 32) return FieldError("target", "has a warp size other than 32");
  return absl::OkStatus();
}

// signature/arg_names, the recorded constexprs and the digests: all optional.
absl::Status ParseOptionalFields(const Json& o, KernelMetadata& m) {
  // Host-side tensor descriptors change the parameter list (driver.py _expand_signature).
  const auto td = o.find("tensordesc_meta");
  if (td != o.end() && td->is_array() && !td->empty()) {
    return absl::UnimplementedError(
        "metadata: the kernel takes tensor descriptors (tensordesc_meta), which this loader does "
        "not support");
  }

  auto signature = Field(o, "signature", Kind::kArray, false);
  if (!signature.ok()) return signature.status();
  if (*signature != nullptr) {
    m.has_signature = true;
    for (const Json& t : **signature) {
      if (!t.is_string()) return FieldError("signature", "must hold strings");
      auto type = ParseArgType(t.get<std::string>());
      if (!type.ok()) return FieldError("signature", type.status().message());
      m.signature.push_back(*type);
    }
    auto names = Field(o, "arg_names", Kind::kArray, false);
    if (!names.ok()) return names.status();
    if (*names != nullptr) {
      for (const Json& n : **names) {
        if (!n.is_string()) return FieldError("arg_names", "must hold strings");
        m.arg_names.push_back(n.get<std::string>());
      }
      if (m.arg_names.size() != m.signature.size()) {
        return FieldError("arg_names", "and 'signature' differ in length");
      }
    }
  }
  auto constexprs = Field(o, "constexprs", Kind::kObject, false);
  if (!constexprs.ok()) return constexprs.status();
  if (*constexprs != nullptr) {
    for (const auto& [key, value] : (*constexprs)->items()) {
      if (IsJsonInteger(value)) {
        m.constexprs.emplace_back(key, value.get<int64_t>());
      } else if (value.is_boolean()) {
        m.constexprs.emplace_back(key, value.get<bool>() ? 1 : 0);
      }
    }
  }
  for (const char* key : {"cubin_sha256", "ptx_sha256"}) {
    auto digest = Field(o, key, Kind::kString, false);
    if (!digest.ok()) return digest.status();
    if (*digest == nullptr) continue;
    const std::string& d = (*digest)->get_ref<const std::string&>();
    if (d.size() != 64 || d.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return FieldError(key, "is not 64 lower-case hex digits");
    }
    (std::string(key) == "cubin_sha256" ? m.cubin_sha256 : m.ptx_sha256) = d;
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelMetadata> ParseMetadataOrThrow(absl::string_view json) {
  auto doc = ParseJson(json);
  if (!doc.ok()) return absl::InvalidArgumentError(absl::StrCat("metadata: ", doc.status().message()));
  if (!doc->is_object()) return absl::InvalidArgumentError("metadata: not a JSON object");
  const Json& o = *doc;
  KernelMetadata m;

  // The version first: fields of an unknown version mean nothing.
  auto version = Field(o, "triton_version", Kind::kString, true);
  if (!version.ok()) return version.status();
  m.triton_version = (*version)->get<std::string>();
  if (!IsSupportedTritonVersion(m.triton_version)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "metadata: compiled by Triton ", m.triton_version,
        ", but this loader implements the launch convention of Triton 3.6 only (checked against "
        "its launcher, triton/backends/nvidia/driver.py); recompile with triton==3.6.0 "
        "(tools/triton_compile.py)"));
  }

  auto name = Field(o, "name", Kind::kString, true);
  if (!name.ok()) return name.status();
  m.name = (*name)->get<std::string>();
  if (m.name.empty()) return FieldError("name", "is empty");

  absl::Status s = ParseLaunchFields(o, m);
  if (s.ok()) s = ParseOptionalFields(o, m);
  if (!s.ok()) return s;
  return m;
}

}  // namespace

absl::StatusOr<KernelMetadata> ParseMetadata(absl::string_view json) {
  // Every access above checks the kind first, so nothing should throw; should a case have been
  // missed, it is an error like any other, not an exception out of the loader.
  try {
    return ParseMetadataOrThrow(json);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("metadata: ", e.what()));
  }
}

absl::StatusOr<int64_t> KernelMetadata::Constexpr(absl::string_view key) const {
  for (const auto& c : constexprs) {
    if (c.first == key) return c.second;
  }
  return absl::NotFoundError(absl::StrCat("metadata of '", name, "' records no integer constexpr '",
                                          key, "'"));
}

}  // namespace triton
}  // namespace conv2d
