#include "conv/triton/kernel_binary.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace conv2d {
namespace triton {

std::string CodeArch::ToString() const {
  return absl::StrCat("sm_", sm, arch_specific ? "a" : "", family_specific ? "f" : "");
}

absl::Status CheckArchRunsOn(const CodeArch& arch, bool is_ptx, int device_cc) {
  const std::string device = absl::StrCat(device_cc / 10, ".", device_cc % 10);
  const char* kind = is_ptx ? "PTX" : "cubin";
  if (arch.arch_specific && device_cc != arch.sm) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", kind, " is for ", arch.ToString(),
                     ", which runs only on compute capability ", arch.sm / 10, ".", arch.sm % 10,
                     "; this device is ", device));
  }
  if (is_ptx) {
    if (device_cc < arch.sm || (arch.family_specific && device_cc / 10 != arch.sm / 10)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the PTX targets ", arch.ToString(), ", which cannot be compiled for compute capability ",
          device));
    }
    return absl::OkStatus();
  }
  if (device_cc / 10 != arch.sm / 10 || device_cc < arch.sm) {
    return absl::FailedPreconditionError(
        absl::StrCat("the cubin is machine code for ", arch.ToString(),
                     ", which does not run on compute capability ", device,
                     " (machine code runs only within its major version)"));
  }
  return absl::OkStatus();
}

namespace {

// ELF64 little-endian constants (the only form cubins take).
constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
constexpr int kElfClass64 = 2;
constexpr int kElfDataLsb = 1;
constexpr uint16_t kEmCuda = 190;
constexpr size_t kElfHeaderSize = 64;
constexpr size_t kSectionHeaderSize = 64;
// .nv.info record formats and the one attribute read here.
constexpr uint8_t kEifmtSval = 0x04;
constexpr uint8_t kEiattrKparamInfo = 0x17;

class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  bool Has(uint64_t offset, uint64_t size) const {
    return offset <= data_.size() && size <= data_.size() - offset;
  }
  template <typename T>
  T Get(uint64_t offset) const {
    T v;
    std::memcpy(&v, data_.data() + offset, sizeof(T));  // little-endian host, as is the ELF
    return v;
  }
  absl::string_view Slice(uint64_t offset, uint64_t size) const {
    return data_.substr(offset, size);
  }

 private:
  absl::string_view data_;
};

absl::Status Corrupt(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("corrupt cubin: ", what));
}

absl::StatusOr<CodeArch> ArchFromFlags(int abi_version, uint32_t flags) {
  CodeArch arch;
  // ptxas up to CUDA 12.x (ELF ABI 7): the SM in bits 0-7, the 'a' flag at bit 11
  // (EF_CUDA_ACCELERATORS_V1). CUDA 13 (ABI 8): the SM in bits 8-15, 'a' at bit 3
  // (EF_CUDA_ACCELERATORS). Checked on cubins from Triton 3.6's ptxas 12.8 (sm_80: 0x00500550,
  // sm_90a: 0x005a0d5a) and nvcc 13.0 (sm_80: 0x06005004, sm_90: 0x06005a04).
  if (abi_version == 7) {
    arch.sm = static_cast<int>(flags & 0xff);
    arch.arch_specific = (flags & 0x800) != 0;
  } else if (abi_version == 8) {
    arch.sm = static_cast<int>((flags >> 8) & 0xff);
    arch.arch_specific = (flags & 0x8) != 0;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown CUDA ELF ABI version ", abi_version, " (known: 7 up to CUDA 12, 8 for CUDA 13)"));
  }
  if (arch.sm < 20 || arch.sm > 199) {
    return Corrupt(absl::StrCat("e_flags 0x", absl::Hex(flags), " name no SM architecture"));
  }
  return arch;
}

// The parameter sizes of the kernel whose .nv.info section is `info`, by ordinal.
absl::StatusOr<std::vector<int>> ParamSizes(absl::string_view info, absl::string_view kernel) {
  Reader r(info);
  std::vector<int> sizes;
  std::vector<bool> seen;
  uint64_t pos = 0;
  while (pos < info.size()) {
    if (!r.Has(pos, 4)) return Corrupt(absl::StrCat(".nv.info.", kernel, " ends mid-record"));
    const uint8_t format = r.Get<uint8_t>(pos);
    const uint8_t attribute = r.Get<uint8_t>(pos + 1);
    if (format != kEifmtSval) {  // EIFMT_NVAL/BVAL/HVAL: two value bytes, 4 bytes in all
      pos += 4;
      continue;
    }
    const uint16_t size = r.Get<uint16_t>(pos + 2);
    if (!r.Has(pos + 4, size)) {
      return Corrupt(absl::StrCat(".nv.info.", kernel, " has a record past its end"));
    }
    if (attribute == kEiattrKparamInfo) {
      // u32 index, u16 ordinal, u16 offset, u32 flags with the size in bits 18-31.
      if (size < 12) return Corrupt("short EIATTR_KPARAM_INFO record");
      const uint16_t ordinal = r.Get<uint16_t>(pos + 8);
      const uint32_t flags = r.Get<uint32_t>(pos + 12);
      if (ordinal >= 4096) return Corrupt("parameter ordinal out of range");
      if (ordinal >= sizes.size()) {
        sizes.resize(ordinal + 1, 0);
        seen.resize(ordinal + 1, false);
      }
      if (seen[ordinal]) return Corrupt(absl::StrCat("parameter ", ordinal, " listed twice"));
      seen[ordinal] = true;
      sizes[ordinal] = static_cast<int>((flags >> 18) & 0x3fff);
    }
    pos += 4 + size;
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) return Corrupt(absl::StrCat("parameter ", i, " of ", kernel, " is not described"));
  }
  return sizes;
}

}  // namespace

absl::StatusOr<CubinInfo> InspectCubin(absl::string_view cubin, absl::string_view kernel) {
  Reader r(cubin);
  if (!r.Has(0, kElfHeaderSize) || std::memcmp(cubin.data(), kElfMagic, 4) != 0) {
    return absl::InvalidArgumentError("not a cubin: no ELF header");
  }
  if (r.Get<uint8_t>(4) != kElfClass64 || r.Get<uint8_t>(5) != kElfDataLsb) {
    return absl::InvalidArgumentError("not a cubin: not a 64-bit little-endian ELF file");
  }
  if (r.Get<uint16_t>(18) != kEmCuda) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a cubin: ELF machine ", r.Get<uint16_t>(18), ", not EM_CUDA (190)"));
  }
  CubinInfo out;
  out.abi_version = r.Get<uint8_t>(8);
  auto arch = ArchFromFlags(out.abi_version, r.Get<uint32_t>(48));
  if (!arch.ok()) return arch.status();
  out.arch = *arch;

  const uint64_t shoff = r.Get<uint64_t>(40);
  const uint16_t shentsize = r.Get<uint16_t>(58);
  const uint16_t shnum = r.Get<uint16_t>(60);
  const uint16_t shstrndx = r.Get<uint16_t>(62);
  if (shentsize != kSectionHeaderSize) return Corrupt("unexpected section header size");
  if (shnum == 0 || shstrndx >= shnum) return Corrupt("no section name table");
  if (!r.Has(shoff, uint64_t{shnum} * kSectionHeaderSize)) {
    return Corrupt("section headers past the end of the file (truncated?)");
  }
  struct Section {
    uint32_t name;
    uint64_t offset, size;
    uint32_t type;
  };
  std::vector<Section> sections(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + uint64_t{i} * kSectionHeaderSize;
    sections[i] = {r.Get<uint32_t>(h), r.Get<uint64_t>(h + 24), r.Get<uint64_t>(h + 32),
                   r.Get<uint32_t>(h + 4)};
    const bool nobits = sections[i].type == 8;  // SHT_NOBITS occupies no file space
    if (!nobits && !r.Has(sections[i].offset, sections[i].size)) {
      return Corrupt(absl::StrCat("section ", i, " lies past the end of the file (truncated?)"));
    }
  }
  const Section& names = sections[shstrndx];
  const absl::string_view strtab = r.Slice(names.offset, names.size);
  auto name_of = [&](const Section& s) -> absl::StatusOr<absl::string_view> {
    if (s.name >= strtab.size()) return Corrupt("section name out of range");
    const size_t end = strtab.find('\0', s.name);
    if (end == absl::string_view::npos) return Corrupt("unterminated section name");
    return strtab.substr(s.name, end - s.name);
  };

  const std::string text_name = absl::StrCat(".text.", kernel);
  const std::string info_name = absl::StrCat(".nv.info.", kernel);
  const Section* info = nullptr;
  bool has_text = false;
  for (const Section& s : sections) {
    auto name = name_of(s);
    if (!name.ok()) return name.status();
    if (absl::StartsWith(*name, ".text.")) out.kernels.emplace_back(name->substr(6));
    if (*name == text_name) has_text = true;
    if (*name == info_name) info = &s;
  }
  if (!has_text) {
    return absl::NotFoundError(absl::StrCat("the cubin has no kernel named '", kernel,
                                            "' (it has: ", absl::StrJoin(out.kernels, ", "), ")"));
  }
  if (info == nullptr) return Corrupt(absl::StrCat("no ", info_name, " section"));
  auto sizes = ParamSizes(r.Slice(info->offset, info->size), kernel);
  if (!sizes.ok()) return sizes.status();
  out.param_sizes = std::move(*sizes);
  return out;
}

namespace {

absl::StatusOr<CodeArch> ParseTarget(absl::string_view target) {
  CodeArch arch;
  if (!absl::ConsumePrefix(&target, "sm_")) {
    return absl::InvalidArgumentError(absl::StrCat("PTX .target '", target, "' is not sm_*"));
  }
  if (absl::ConsumeSuffix(&target, "a")) {
    arch.arch_specific = true;
  } else if (absl::ConsumeSuffix(&target, "f")) {
    arch.family_specific = true;
  }
  if (!absl::SimpleAtoi(target, &arch.sm) || arch.sm < 20 || arch.sm > 199) {
    return absl::InvalidArgumentError(absl::StrCat("PTX .target sm_", target, " is not an SM"));
  }
  return arch;
}

// The size in bytes of a PTX parameter declaration (the text after ".param").
absl::StatusOr<int> PtxParamSize(absl::string_view decl) {
  std::vector<absl::string_view> tokens =
      absl::StrSplit(decl, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const absl::string_view t = tokens[i];
    if (t == ".align") {  // .align N .b8 name[BYTES]
      ++i;
      continue;
    }
    if (t.size() == 3 || t.size() == 4) {
      const char kind = t.size() > 1 ? t[1] : 0;
      int bits = 0;
      if (t[0] == '.' && (kind == 'u' || kind == 's' || kind == 'b' || kind == 'f') &&
          absl::SimpleAtoi(t.substr(2), &bits) && (bits == 8 || bits == 16 || bits == 32 ||
                                                  bits == 64)) {
        if (i + 1 < tokens.size()) {
          absl::string_view name = tokens.back();
          const size_t open = name.find('[');
          if (open != absl::string_view::npos && absl::EndsWith(name, "]")) {
            int count = 0;
            if (!absl::SimpleAtoi(name.substr(open + 1, name.size() - open - 2), &count)) {
              return absl::InvalidArgumentError(absl::StrCat("bad PTX parameter '", decl, "'"));
            }
            return count * bits / 8;
          }
        }
        return bits / 8;
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unrecognised PTX parameter '", decl, "'"));
}

}  // namespace

absl::StatusOr<PtxInfo> InspectPtx(absl::string_view ptx, absl::string_view kernel) {
  if (ptx.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError("corrupt PTX: contains a NUL byte");
  }
  PtxInfo out;
  const size_t version = ptx.find(".version ");
  if (version == absl::string_view::npos) {
    return absl::InvalidArgumentError("not PTX: no .version directive");
  }
  {
    absl::string_view v = ptx.substr(version + 9, 16);
    v = v.substr(0, v.find_first_of(" \t\r\n"));
    std::vector<absl::string_view> parts = absl::StrSplit(v, '.');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &out.version_major) ||
        !absl::SimpleAtoi(parts[1], &out.version_minor)) {
      return absl::InvalidArgumentError(absl::StrCat("bad PTX .version '", v, "'"));
    }
  }
  const size_t target = ptx.find(".target ");
  if (target == absl::string_view::npos) {
    return absl::InvalidArgumentError("not PTX: no .target directive");
  }
  {
    absl::string_view t = ptx.substr(target + 8, 32);
    t = t.substr(0, t.find_first_of(", \t\r\n"));
    auto arch = ParseTarget(t);
    if (!arch.ok()) return arch.status();
    out.arch = *arch;
  }
  const std::string entry = absl::StrCat(".entry ", kernel, "(");
  const size_t at = ptx.find(entry);
  if (at == absl::string_view::npos) {
    return absl::NotFoundError(absl::StrCat("the PTX has no .entry named '", kernel, "'"));
  }
  const size_t open = at + entry.size();
  const size_t close = ptx.find(')', open);
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError("corrupt PTX: unterminated .entry parameter list");
  }
  const absl::string_view params = ptx.substr(open, close - open);
  for (absl::string_view decl : absl::StrSplit(params, ',')) {
    decl = absl::StripAsciiWhitespace(decl);
    if (decl.empty()) continue;
    if (!absl::ConsumePrefix(&decl, ".param")) {
      return absl::InvalidArgumentError(absl::StrCat("bad PTX parameter '", decl, "'"));
    }
    auto size = PtxParamSize(decl);
    if (!size.ok()) return size.status();
    out.param_sizes.push_back(*size);
  }
  return out;
}

}  // namespace triton
}  // namespace conv2d
