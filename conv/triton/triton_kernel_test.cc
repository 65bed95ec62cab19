// The Triton loader's checks, all made before the CUDA driver is involved, on the real embedded
// artifacts and on corrupted copies of them. Runs anywhere; where a driver is present (the GPU
// host) the "no CUDA driver" case is skipped.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "conv/shape.h"
#include "conv/testing/shapes.h"
#include "conv/triton/cuda_driver.h"
#include "conv/algorithms/triton/igemm_artifacts.h"
#include "conv/triton/json.h"
#include "conv/triton/kernel_binary.h"
#include "conv/triton/sha256.h"
#include "conv/algorithms/triton/triton_igemm.h"
#include "conv/triton/triton_kernel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace triton {
namespace {

using ::testing::HasSubstr;

constexpr char kWide[] = "igemm_conv_m128_n64";
constexpr char kNarrow[] = "igemm_conv_m64_n32";

std::vector<ArgType> IgemmSignature() {
  std::vector<ArgType> s(3, ArgType::kPointer);
  s.insert(s.end(), 10, ArgType::kI32);
  return s;
}

KernelArgs IgemmArgs() {
  KernelArgs a;
  a.Pointer(nullptr).Pointer(nullptr).Pointer(nullptr);
  for (int i = 0; i < 10; ++i) a.I32(i + 1);
  return a;
}

KernelImage Image(const char* base) {
  auto image = ImageFromEmbedded(IgemmConvArtifacts(), base);
  EXPECT_TRUE(image.ok()) << image.status();
  return *image;
}

// Removes a top-level key from the metadata JSON tools/triton_compile.py writes (one space of
// indentation per level, keys sorted).
std::string RemoveKey(std::string json, const std::string& key) {
  const std::string start = "\n \"" + key + "\":";
  const size_t at = json.find(start);
  EXPECT_NE(at, std::string::npos) << key;
  if (at == std::string::npos) return json;
  size_t next = json.find("\n \"", at + 1);
  if (next == std::string::npos) {  // the last key: drop the comma before it instead
    const size_t end = json.rfind("\n}");
    const size_t comma = json.rfind(',', at);
    json.erase(at, end - at);
    json.erase(comma, 1);
    return json;
  }
  json.erase(at, next - at);
  return json;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

template <typename T>
void Poke(std::string& bytes, size_t offset, T value) {
  std::memcpy(&bytes[offset], &value, sizeof(T));
}

template <typename T>
T Peek(const std::string& bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

// ---------------------------------------------------------------------------------------------

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first padding block.
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Json, ParsesValues) {
  auto v = ParseJson(R"( {"a": [1, -2.5e3, true, null, "x\u00e9\ud83d\ude00\n"], "b": {}} )");
  ASSERT_TRUE(v.ok()) << v.status();
  const JsonValue* a = v->Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array().size(), 5u);
  EXPECT_TRUE(a->array()[0].is_integer());
  EXPECT_EQ(a->array()[0].integer(), 1);
  EXPECT_FALSE(a->array()[1].is_integer());
  EXPECT_EQ(a->array()[1].number(), -2500.0);
  EXPECT_TRUE(a->array()[2].bool_value());
  EXPECT_TRUE(a->array()[3].is_null());
  EXPECT_EQ(a->array()[4].string(), "x\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_TRUE(v->Find("b")->is_object());
}

TEST(Json, IsStrict) {
  for (const char* bad : {"", "{", "{\"a\": 1,}", "[1, 2,]", "{\"a\": 1} x", "{'a': 1}",
                          "{\"a\": 01}", "{\"a\": NaN}", "{\"a\": Infinity}", "{\"a\": .5}",
                          "{\"a\": 1.}", "{\"a\": 1, \"a\": 2}", "{\"a\": \"x\ty\"}",
                          "{\"a\": \"\\x\"}", "// c\n{}", "{\"a\": \"\\ud800\"}", "{\"a\": 1e999}",
                          "{\"a\" 1}", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"}) {
    auto v = ParseJson(bad);
    EXPECT_FALSE(v.ok()) << "accepted: " << bad;
  }
  auto v = ParseJson("{\n  \"a\": 1,\n  \"b\": tru\n}");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("line 3, column 8"));
}

// ---------------------------------------------------------------------------------------------

TEST(KernelBinary, ReadsTheEmbeddedCubin) {
  const KernelImage image = Image(kWide);
  auto info = InspectCubin(image.cubin, "igemm_conv");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->abi_version, 7);  // Triton 3.6 ships ptxas 12.8
  EXPECT_EQ(info->arch.sm, 90);
  EXPECT_TRUE(info->arch.arch_specific);
  EXPECT_EQ(info->arch.ToString(), "sm_90a");
  EXPECT_EQ(info->kernels, std::vector<std::string>{"igemm_conv"});
  // x, w, y, ten int32 sizes, then Triton's global_scratch and profile_scratch pointers.
  const std::vector<int> want = {8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 8, 8};
  EXPECT_EQ(info->param_sizes, want);

  auto ptx = InspectPtx(image.ptx, "igemm_conv");
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_EQ(ptx->version_major, 8);
  EXPECT_EQ(ptx->version_minor, 7);
  EXPECT_EQ(ptx->arch.ToString(), "sm_90a");
  EXPECT_EQ(ptx->param_sizes, want);
}

TEST(KernelBinary, DecodesBothElfFlagLayouts) {
  std::string cubin = Image(kWide).cubin;
  // ptxas 12.x (ABI 7) for sm_80: SM in the low byte, no 'a' flag.
  Poke<uint32_t>(cubin, 48, 0x00500550);
  auto info = InspectCubin(cubin, "igemm_conv");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->arch.ToString(), "sm_80");
  // nvcc 13.0 (ABI 8) for sm_90: SM in bits 8-15.
  cubin[8] = 8;
  Poke<uint32_t>(cubin, 48, 0x06005a04);
  info = InspectCubin(cubin, "igemm_conv");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->arch.ToString(), "sm_90");
  Poke<uint32_t>(cubin, 48, 0x06006408);  // ABI 8, sm_100a
  info = InspectCubin(cubin, "igemm_conv");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->arch.ToString(), "sm_100a");
  cubin[8] = 9;
  info = InspectCubin(cubin, "igemm_conv");
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("ABI version 9"));
}

TEST(KernelBinary, RefusesCorruptCubins) {
  const std::string cubin = Image(kWide).cubin;
  struct Case {
    std::string bytes;
    const char* error;
  };
  std::string bad_magic = cubin;
  bad_magic[1] = 'X';
  std::string not_cuda = cubin;
  Poke<uint16_t>(not_cuda, 18, 62);  // EM_X86_64
  std::string bad_sections = cubin;
  Poke<uint64_t>(bad_sections, 40, uint64_t{1} << 40);
  std::string bad_flags = cubin;
  Poke<uint32_t>(bad_flags, 48, 0x00500503);  // "sm_3"
  std::string bad_info = cubin;
  // Garble every EIATTR_KPARAM_INFO record's size so that records run past their section.
  for (size_t i = 0; i + 4 < bad_info.size(); ++i) {
    if (bad_info[i] == 0x04 && bad_info[i + 1] == 0x17 && Peek<uint16_t>(bad_info, i + 2) == 12) {
      Poke<uint16_t>(bad_info, i + 2, 0x7fff);
    }
  }
  const std::vector<Case> cases = {
      {"", "no ELF header"},
      {cubin.substr(0, 40), "no ELF header"},
      {"garbage that is long enough to hold an ELF header but is not one at all........", "no ELF"},
      {bad_magic, "no ELF header"},
      {not_cuda, "not EM_CUDA"},
      {cubin.substr(0, cubin.size() / 2), "truncated"},
      {bad_sections, "truncated"},
      {bad_flags, "no SM architecture"},
      {bad_info, "past its end"},
  };
  for (const Case& c : cases) {
    auto info = InspectCubin(c.bytes, "igemm_conv");
    ASSERT_FALSE(info.ok()) << c.error;
    EXPECT_THAT(std::string(info.status().message()), HasSubstr(c.error));
  }
  auto info = InspectCubin(cubin, "other_kernel");
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("it has: igemm_conv"));
}

TEST(KernelBinary, ArchCompatibility) {
  const CodeArch sm90a{90, true, false}, sm80{80, false, false}, sm90{90, false, false};
  EXPECT_TRUE(CheckArchRunsOn(sm90a, false, 90).ok());
  EXPECT_FALSE(CheckArchRunsOn(sm90a, false, 100).ok());
  EXPECT_FALSE(CheckArchRunsOn(sm90a, true, 100).ok());  // 'a' PTX does not move forward
  EXPECT_FALSE(CheckArchRunsOn(sm90a, false, 80).ok());
  EXPECT_TRUE(CheckArchRunsOn(sm80, false, 86).ok());
  EXPECT_FALSE(CheckArchRunsOn(sm80, false, 90).ok());  // machine code stays in its major
  EXPECT_TRUE(CheckArchRunsOn(sm80, true, 90).ok());    // PTX is JIT-compiled forward
  EXPECT_FALSE(CheckArchRunsOn(sm90, false, 89).ok());
  auto s = CheckArchRunsOn(sm80, false, 90);
  EXPECT_THAT(std::string(s.message()), HasSubstr("sm_80"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("9.0"));
}

TEST(KernelBinary, RefusesBadPtx) {
  const std::string ptx = Image(kWide).ptx;
  EXPECT_FALSE(InspectPtx(std::string("x\0y", 3), "igemm_conv").ok());
  EXPECT_FALSE(InspectPtx("garbage", "igemm_conv").ok());
  auto info = InspectPtx(ptx, "other_kernel");
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("no .entry named 'other_kernel'"));
  info = InspectPtx(Replace(ptx, ".target sm_90a", ".target compute_90"), "igemm_conv");
  EXPECT_FALSE(info.ok());
}

// ---------------------------------------------------------------------------------------------

TEST(Metadata, ParsesTheEmbeddedMetadata) {
  for (const char* base : {kWide, kNarrow}) {
    auto m = ParseMetadata(Image(base).metadata_json);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->name, "igemm_conv");
    EXPECT_EQ(m->triton_version, "3.6.0");
    EXPECT_EQ(m->target_backend, "cuda");
    EXPECT_EQ(m->target_arch, 90);
    EXPECT_EQ(m->warp_size, 32);
    EXPECT_EQ(m->num_ctas, 1);
    EXPECT_EQ(m->global_scratch_size, 0);
    EXPECT_EQ(m->profile_scratch_size, 0);
    EXPECT_FALSE(m->launch_pdl);
    EXPECT_FALSE(m->launch_cooperative_grid);
    EXPECT_TRUE(m->has_signature);
    EXPECT_EQ(m->signature, IgemmSignature());
    EXPECT_EQ(m->arg_names.front(), "x_ptr");
    EXPECT_EQ(*m->Constexpr("BLOCK_K"), 16);
    EXPECT_FALSE(m->Constexpr("NOPE").ok());
  }
  auto wide = ParseMetadata(Image(kWide).metadata_json);
  EXPECT_EQ(wide->num_warps, 8);
  EXPECT_GT(wide->shared, 49152);  // exercises the dynamic shared memory opt-in on the GPU
  EXPECT_EQ(*wide->Constexpr("BLOCK_M"), 128);
  EXPECT_EQ(*wide->Constexpr("BLOCK_N"), 64);
}

TEST(Metadata, AcceptsTritonsOwnCacheJson) {
  // The shape of ~/.triton/cache/<hash>/igemm_conv.json as triton 3.6.0 writes it.
  const char* native = R"({"hash": "224a283b", "target": {"backend": "cuda", "arch": 90,
    "warp_size": 32}, "num_warps": 4, "num_ctas": 1, "num_stages": 4, "warp_size": 32,
    "maxnreg": null, "ptx_version": null, "enable_fp_fusion": true, "launch_cooperative_grid":
    false, "launch_pdl": false, "supported_fp8_dtypes": ["fp8e4b15", "fp8e4nv", "fp8e5"],
    "extern_libs": [["libdevice", "/x/libdevice.10.bc"]], "debug": false, "arch": "sm90",
    "triton_version": "3.6.0", "tensordesc_meta": [], "shared": 22528, "tmem_size": 0,
    "global_scratch_size": 0, "global_scratch_align": 1, "profile_scratch_size": 0,
    "profile_scratch_align": 1, "name": "igemm_conv"})";
  auto m = ParseMetadata(native);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->has_signature);
  EXPECT_EQ(m->shared, 22528);

  // Without a recorded signature the code's own parameter table still checks the mapping.
  KernelImage image = Image(kNarrow);
  image.metadata_json = native;
  auto k = TritonKernel::Create(image, IgemmSignature());
  EXPECT_TRUE(k.ok()) << k.status();
  std::vector<ArgType> wrong = IgemmSignature();
  wrong[4] = ArgType::kI64;
  k = TritonKernel::Create(image, wrong);
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("parameters of sizes"));
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("disagree"));

  m = ParseMetadata(Replace(native, R"("tensordesc_meta": [])",
                            R"("tensordesc_meta": [{"swizzle": 3}])"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(Metadata, RefusesUnknownTritonVersions) {
  const std::string json = Image(kWide).metadata_json;
  for (const char* version : {"3.2.0", "3.5.1", "3.7.0", "4.0.0", "2.3.1", "three", ""}) {
    auto m = ParseMetadata(
        Replace(json, R"("triton_version": "3.6.0")", absl::StrCat(R"("triton_version": ")",
                                                                   version, "\"")));
    ASSERT_FALSE(m.ok()) << version;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("Triton 3.6 only"));
  }
  EXPECT_TRUE(IsSupportedTritonVersion("3.6.1"));
  EXPECT_TRUE(IsSupportedTritonVersion("3.6.0+git1234abcd"));
  EXPECT_FALSE(IsSupportedTritonVersion("3.60.0"));
}

TEST(Metadata, RefusesMissingFields) {
  const std::string json = Image(kWide).metadata_json;
  for (const char* key : {"name", "num_warps", "shared", "global_scratch_size",
                          "global_scratch_align", "profile_scratch_size", "launch_pdl",
                          "launch_cooperative_grid", "triton_version", "target"}) {
    auto m = ParseMetadata(RemoveKey(json, key));
    ASSERT_FALSE(m.ok()) << key;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(absl::StrCat("'", key, "'")));
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("missing"));
  }
  // Optional ones default.
  auto m = ParseMetadata(RemoveKey(RemoveKey(json, "num_ctas"), "profile_scratch_align"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->num_ctas, 1);
  EXPECT_EQ(m->profile_scratch_align, 1);
}

TEST(Metadata, RefusesBadValues) {
  const std::string json = Image(kWide).metadata_json;
  struct Case {
    const char* from;
    const char* to;
    const char* error;
  };
  const std::vector<Case> cases = {
      {R"("num_warps": 8)", R"("num_warps": "8")", "must be an integer, not a string"},
      {R"("num_warps": 8)", R"("num_warps": 3)", "power of two"},
      {R"("num_warps": 8)", R"("num_warps": 64)", "outside"},
      {R"("num_warps": 8)", R"("num_warps": 8.5)", "a fraction"},
      {R"("shared": )", R"("shared": -)", "outside"},
      {R"("global_scratch_align": 1)", R"("global_scratch_align": 6)", "power of two"},
      {R"("launch_pdl": false)", R"("launch_pdl": 0)", "must be a boolean"},
      {R"("backend": "cuda")", R"("backend": "hip")", "not 'cuda'"},
      {R"("warp_size": 32)", R"("warp_size": 64)", "warp size"},
      {R"("name": "igemm_conv")", R"("name": "")", "empty"},
      {R"("*fp32",)", R"("tensordesc<fp32[64, 64]>",)", "tensor descriptors"},
      {R"("*fp32",)", R"("constexpr",)", "constexpr"},
      {R"("*fp32",)", R"("f8",)", "unknown Triton parameter type"},
      {R"("cubin_sha256": ")", R"("cubin_sha256": "A)", "hex"},
      {"{", "[", "JSON"},
  };
  for (const Case& c : cases) {
    auto m = ParseMetadata(Replace(json, c.from, c.to));
    ASSERT_FALSE(m.ok()) << c.to;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(c.error)) << c.to;
  }
}

// ---------------------------------------------------------------------------------------------

TEST(TritonKernel, AcceptsTheEmbeddedKernels) {
  for (const char* base : {kWide, kNarrow}) {
    auto k = TritonKernel::Create(Image(base), IgemmSignature());
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_FALSE((*k)->loaded());
    EXPECT_EQ((*k)->label(), base);
    EXPECT_TRUE((*k)->CheckArgs(IgemmArgs()).ok());
    EXPECT_TRUE((*k)->CheckDeviceArch(90).ok());
    EXPECT_EQ((*k)->ScratchBytes(Grid{100, 2, 1}), 0u);
    // A PTX-only or cubin-only image works too.
    KernelImage image = Image(base);
    image.cubin.clear();
    EXPECT_TRUE(TritonKernel::Create(image, IgemmSignature()).ok());
    image = Image(base);
    image.ptx.clear();
    EXPECT_TRUE(TritonKernel::Create(image, IgemmSignature()).ok());
  }
  auto k = TritonKernel::Create(Image(kWide), IgemmSignature());
  EXPECT_EQ((*k)->block_threads(), 256);
}

TEST(TritonKernel, RefusesOtherDevices) {
  auto k = TritonKernel::Create(Image(kWide), IgemmSignature());
  ASSERT_TRUE(k.ok()) << k.status();
  for (int cc : {70, 80, 86, 89, 100, 120}) {
    absl::Status s = (*k)->CheckDeviceArch(cc);
    ASSERT_FALSE(s.ok()) << cc;
    EXPECT_THAT(std::string(s.message()), HasSubstr("no code for this device"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("sm_90a"));
  }
  EXPECT_TRUE((*k)->CheckDeviceArch(90, CodeChoice::kPtxOnly).ok());
  EXPECT_TRUE((*k)->CheckDeviceArch(90, CodeChoice::kCubinOnly).ok());
}

TEST(TritonKernel, RefusesACubinForAnotherArchitecture) {
  // An sm_80 cubin (ELF ABI 7 flags as ptxas 12.8 writes them) next to sm_90 metadata.
  KernelImage image = Image(kWide);
  Poke<uint32_t>(image.cubin, 48, 0x00500550);
  image.metadata_json = RemoveKey(image.metadata_json, "cubin_sha256");
  auto k = TritonKernel::Create(image, IgemmSignature());
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()),
              HasSubstr("the cubin is for sm_80 but the metadata's target is arch 90"));
  // Metadata for sm_80 beside the sm_90a cubin.
  image = Image(kWide);
  image.metadata_json = Replace(image.metadata_json, R"("arch": 90)", R"("arch": 80)");
  k = TritonKernel::Create(image, IgemmSignature());
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("sm_90a"));
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("arch 80"));
  // And an sm_80 cubin with matching metadata loads nowhere but on 8.x.
  image = Image(kWide);
  Poke<uint32_t>(image.cubin, 48, 0x00500550);
  image.ptx.clear();
  image.metadata_json = Replace(RemoveKey(image.metadata_json, "cubin_sha256"), R"("arch": 90)",
                                R"("arch": 80)");
  k = TritonKernel::Create(image, IgemmSignature());
  ASSERT_TRUE(k.ok()) << k.status();
  absl::Status s = (*k)->CheckDeviceArch(90);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("sm_80"));
  EXPECT_TRUE((*k)->CheckDeviceArch(86).ok());
}

TEST(TritonKernel, RefusesCorruptOrMismatchedCode) {
  // The digest catches any change...
  KernelImage image = Image(kWide);
  image.cubin[image.cubin.size() / 2] ^= 1;
  auto k = TritonKernel::Create(image, IgemmSignature());
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("cubin_sha256"));
  image = Image(kWide);
  image.ptx += " ";
  k = TritonKernel::Create(image, IgemmSignature());
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("ptx_sha256"));
  // ...the other kernel's cubin next to this metadata...
  image = Image(kWide);
  image.cubin = Image(kNarrow).cubin;
  k = TritonKernel::Create(image, IgemmSignature());
  EXPECT_FALSE(k.ok());
  // ...and without digests the structure checks still refuse a truncated cubin.
  image = Image(kWide);
  image.metadata_json = RemoveKey(image.metadata_json, "cubin_sha256");
  image.cubin.resize(image.cubin.size() / 2);
  k = TritonKernel::Create(image, IgemmSignature());
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()), HasSubstr(kWide));
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("corrupt cubin"));
  // Metadata naming a kernel the code does not have.
  image = Image(kWide);
  image.metadata_json = Replace(image.metadata_json, R"("name": "igemm_conv")",
                                R"("name": "conv_kernel")");
  k = TritonKernel::Create(image, IgemmSignature());
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("no kernel named 'conv_kernel'"));
  // Neither code.
  image = Image(kWide);
  image.cubin.clear();
  image.ptx.clear();
  EXPECT_FALSE(TritonKernel::Create(image, IgemmSignature()).ok());
}

TEST(TritonKernel, RefusesAMappingThatDoesNotMatch) {
  std::vector<ArgType> fewer = IgemmSignature();
  fewer.pop_back();
  auto k = TritonKernel::Create(Image(kWide), fewer);
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("takes 13 run-time arguments"));
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("x_ptr, w_ptr"));
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("passes 12"));

  std::vector<ArgType> wrong = IgemmSignature();
  wrong[4] = ArgType::kI64;
  k = TritonKernel::Create(Image(kWide), wrong);
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()),
              HasSubstr("argument 4 ('N') is i32 in the kernel but i64 in the argument mapping"));

  // A signature that disagrees with the code's own parameter table (metadata edited).
  KernelImage image = Image(kWide);
  image.metadata_json = Replace(image.metadata_json, R"("i32",)", R"("i64",)");
  std::vector<ArgType> edited = IgemmSignature();
  edited[3] = ArgType::kI64;
  k = TritonKernel::Create(image, edited);
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("scratch pointers"));
}

TEST(TritonKernel, ChecksLaunchArgumentsBeforeTheDriver) {
  auto k = TritonKernel::Create(Image(kWide), IgemmSignature());
  ASSERT_TRUE(k.ok()) << k.status();
  KernelArgs short_args;
  short_args.Pointer(nullptr).Pointer(nullptr).Pointer(nullptr).I32(1);
  absl::Status s = (*k)->CheckArgs(short_args);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("takes 13 arguments"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("4 given"));

  KernelArgs wrong_type;
  wrong_type.Pointer(nullptr).Pointer(nullptr).Pointer(nullptr);
  for (int i = 0; i < 9; ++i) wrong_type.I32(1);
  wrong_type.F32(1.0f);
  s = (*k)->CheckArgs(wrong_type);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("argument 12 ('KHW') must be i32, got fp32"));

  // Launch checks the same before anything else, then that Load happened.
  s = (*k)->Launch(Grid{1, 1, 1}, short_args, nullptr, 0, nullptr);
  EXPECT_THAT(std::string(s.message()), HasSubstr("4 given"));
  s = (*k)->Launch(Grid{1, 70000, 1}, IgemmArgs(), nullptr, 0, nullptr);
  EXPECT_THAT(std::string(s.message()), HasSubstr("exceeds CUDA's limits"));
  s = (*k)->Launch(Grid{1, 1, 1}, IgemmArgs(), nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("before a successful Load"));
}

TEST(TritonKernel, SizesScratchAsTritonDoes) {
  // CudaLauncher: grid_x*grid_y*grid_z*num_ctas*size per buffer; plus alignment slack here.
  KernelImage image = Image(kWide);
  image.metadata_json = Replace(
      Replace(Replace(image.metadata_json, R"("global_scratch_size": 0)",
                      R"("global_scratch_size": 128)"),
              R"("global_scratch_align": 1)", R"("global_scratch_align": 16)"),
      R"("profile_scratch_size": 0)", R"("profile_scratch_size": 8)");
  auto k = TritonKernel::Create(image, IgemmSignature());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)->ScratchBytes(Grid{3, 2, 1}), 3u * 2 * 128 + 15 + 3 * 2 * 8);
  absl::Status s = (*k)->Launch(Grid{3, 2, 1}, IgemmArgs(), nullptr, 0, nullptr);
  EXPECT_THAT(std::string(s.message()), HasSubstr("scratch"));
}

TEST(TritonKernel, ReadsArtifactFiles) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  const std::string prefix = dir + "/" + kNarrow;
  const KernelImage image = Image(kNarrow);
  auto write = [](const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  };
  write(prefix + ".json", image.metadata_json);
  write(prefix + ".ptx", image.ptx);
  std::remove((prefix + ".cubin").c_str());
  auto read = ReadKernelImage(prefix);  // PTX only: the fallback
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->cubin.empty());
  EXPECT_EQ(read->label, kNarrow);
  EXPECT_TRUE(TritonKernel::Create(*read, IgemmSignature()).ok());
  write(prefix + ".cubin", image.cubin);
  read = ReadKernelImage(prefix);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->cubin, image.cubin);
  std::remove((prefix + ".cubin").c_str());
  std::remove((prefix + ".ptx").c_str());
  read = ReadKernelImage(prefix);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(".cubin or"));
  read = ReadKernelImage(dir + "/missing_kernel");
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("missing_kernel.json"));
  EXPECT_FALSE(ImageFromEmbedded(IgemmConvArtifacts(), "missing_kernel").ok());
}

TEST(TritonKernel, LoadSaysNoCudaDriverWithoutOne) {
  if (GetCudaDriver().ok()) GTEST_SKIP() << "a CUDA driver is present";
  auto k = TritonKernel::Create(Image(kWide), IgemmSignature());
  ASSERT_TRUE(k.ok()) << k.status();
  absl::Status s = (*k)->Load();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no CUDA driver"));
  EXPECT_FALSE((*k)->loaded());
}

// ---------------------------------------------------------------------------------------------

TEST(TritonIgemm, MappingFitsTheStandardShapes) {
  std::vector<Shape> shapes = EdgeShapes();
  for (const Shape& s : KernelBotTestShapes()) shapes.push_back(s);
  for (const Shape& s : KernelBotBenchmarkShapes()) shapes.push_back(s);
  for (const Shape& s : shapes) {
    absl::Status st = CheckTritonIgemmOffline(s);
    EXPECT_TRUE(st.ok()) << s.ToString() << ": " << st;
  }
}

TEST(TritonIgemm, RefusesShapesWhoseOffsetsOverflowInt32) {
  // 2^31 input elements and more: CheckFitsInt32.
  absl::Status s = CheckTritonIgemmOffline(Shape{2048, 64, 64, 128, 128, 3, 3});
  EXPECT_FALSE(s.ok());
  // Every tensor fits int32, but the masked lanes of the last, padded tile would form offsets
  // past 2^31.
  Shape edge{1, 1, 1, 46340, 46340, 1, 1};  // 2147395600 elements < 2^31
  s = CheckTritonIgemmOffline(edge);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("triton_igemm"));
}

}  // namespace
}  // namespace triton
}  // namespace conv2d
