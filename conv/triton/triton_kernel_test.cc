// TritonKernel's checks, all made before the CUDA driver is involved, on the real embedded
// artifacts and on corrupted copies of them, and triton_igemm's mapping on the standard shapes.
// Runs anywhere; where a driver is present (the GPU host) the "no CUDA driver" case is skipped.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "conv/algorithms/triton/triton_igemm.h"
#include "conv/shape.h"
#include "conv/testing/shapes.h"
#include "conv/triton/cuda_driver.h"
#include "conv/triton/test_artifacts.h"
#include "conv/triton/triton_kernel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace triton {
namespace {

using ::testing::HasSubstr;

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
