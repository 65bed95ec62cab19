// The loader's checks that need no driver: a kernel's artifacts (embedded or on disk), and
// TritonKernel::Create and CheckDeviceArch, which hold the metadata, the code's architecture and
// parameter table, the digests and the caller's argument mapping against each other. The
// launch-time arguments are in kernel_args.cc, the driver side in triton_launch.cc.
#include "conv/triton/triton_kernel.h"

#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "conv/triton/kernel_binary.h"
#include "conv/triton/sha256.h"

namespace conv2d {
namespace triton {

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

// What Create and CheckDeviceArch read from either kind of code.
struct CodeFacts {
  CodeArch arch;
  std::vector<int> param_sizes;
};

absl::StatusOr<CodeFacts> Inspect(const std::string& code, bool is_ptx, absl::string_view kernel) {
  if (is_ptx) {
    auto ptx = InspectPtx(code, kernel);
    if (!ptx.ok()) return ptx.status();
    return CodeFacts{ptx->arch, std::move(ptx->param_sizes)};
  }
  auto cubin = InspectCubin(code, kernel);
  if (!cubin.ok()) return cubin.status();
  return CodeFacts{cubin->arch, std::move(cubin->param_sizes)};
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

  // Digests tie the metadata to the code it was written with...
  for (const bool is_ptx : {false, true}) {
    const std::string& code = is_ptx ? image.ptx : image.cubin;
    const std::string& digest = is_ptx ? m.ptx_sha256 : m.cubin_sha256;
    if (code.empty() || digest.empty() || Sha256Hex(code) == digest) continue;
    const char* what = is_ptx ? "PTX" : "cubin";
    return absl::DataLossError(absl::StrCat(
        label, ": the ", what, "'s SHA-256 differs from the metadata's ",
        is_ptx ? "ptx_sha256" : "cubin_sha256", ": corrupt, or not the ", what,
        " this metadata was written for"));
  }
  // ...and the code's own architecture and parameter table to the metadata and the mapping.
  for (const bool is_ptx : {false, true}) {
    const std::string& code = is_ptx ? image.ptx : image.cubin;
    if (code.empty()) continue;
    auto facts = Inspect(code, is_ptx, m.name);
    if (!facts.ok()) return prefix(facts.status());
    if (facts->arch.sm != m.target_arch) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, is_ptx ? ": the PTX targets " : ": the cubin is for ", facts->arch.ToString(),
          " but the metadata's target is arch ", m.target_arch, ": mismatched artifacts"));
    }
    absl::Status s =
        CheckParamTable(label, is_ptx ? "PTX" : "cubin", facts->param_sizes, expected);
    if (!s.ok()) return s;
  }
  std::vector<ArgType> signature(expected.begin(), expected.end());
  return std::unique_ptr<TritonKernel>(
      new TritonKernel(std::move(image), std::move(*metadata), std::move(signature)));
}

absl::Status TritonKernel::CheckDeviceArch(int cc, CodeChoice choice) const {
  std::vector<std::string> why;
  // The architecture comes from the code itself (checked equal to the metadata's in Create).
  for (const bool is_ptx : {false, true}) {
    if (choice == (is_ptx ? CodeChoice::kCubinOnly : CodeChoice::kPtxOnly)) continue;
    const std::string& code = is_ptx ? image_.ptx : image_.cubin;
    if (code.empty()) {
      why.push_back(is_ptx ? "no PTX" : "no cubin");
      continue;
    }
    auto facts = Inspect(code, is_ptx, metadata_.name);
    if (!facts.ok()) return facts.status();
    absl::Status s = CheckArchRunsOn(facts->arch, is_ptx, cc);
    if (s.ok()) return s;
    why.push_back(std::string(s.message()));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(label(), ": no code for this device: ", absl::StrJoin(why, "; ")));
}

}  // namespace triton
}  // namespace conv2d
