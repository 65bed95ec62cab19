// The code readers (kernel_binary.h) and the digest (sha256.h) on the embedded cubin and PTX and
// on corrupted copies of them: what the loader learns from the code before trusting it.
#include <cstdint>
#include <string>
#include <vector>

#include "conv/triton/kernel_binary.h"
#include "conv/triton/sha256.h"
#include "conv/triton/test_artifacts.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace triton {
namespace {

using ::testing::HasSubstr;

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first padding block.
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

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

}  // namespace
}  // namespace triton
}  // namespace conv2d
