// Reading a kernel's metadata: ParseJson's strictness (json.h) and ParseMetadata's field checks
// (metadata.h) on the embedded .json, on Triton's own cache JSON and on edited copies.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv/triton/json.h"
#include "conv/triton/metadata.h"
#include "conv/triton/test_artifacts.h"
#include "conv/triton/triton_kernel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace triton {
namespace {

using ::testing::HasSubstr;

TEST(Json, ParsesValues) {
  auto v = ParseJson(R"( {"a": [1, -2.5e3, true, null, "x\u00e9\ud83d\ude00\n"], "b": {}} )");
  ASSERT_TRUE(v.ok()) << v.status();
  const auto a = v->find("a");
  ASSERT_NE(a, v->end());
  ASSERT_TRUE(a->is_array());
  ASSERT_EQ(a->size(), 5u);
  EXPECT_TRUE(IsJsonInteger((*a)[0]));
  EXPECT_EQ((*a)[0].get<int64_t>(), 1);
  EXPECT_FALSE(IsJsonInteger((*a)[1]));
  EXPECT_EQ((*a)[1].get<double>(), -2500.0);
  EXPECT_TRUE((*a)[2].get<bool>());
  EXPECT_TRUE((*a)[3].is_null());
  EXPECT_EQ((*a)[4].get<std::string>(), "x\xc3\xa9\xf0\x9f\x98\x80\n");
  const auto b = v->find("b");
  ASSERT_NE(b, v->end());
  EXPECT_TRUE(b->is_object());
  // Integers are those that fit int64, as before the parser was nlohmann's.
  v = ParseJson("[9223372036854775807, -9223372036854775808, 9223372036854775808, 1e2]");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(IsJsonInteger((*v)[0]));
  EXPECT_TRUE(IsJsonInteger((*v)[1]));
  EXPECT_FALSE(IsJsonInteger((*v)[2]));
  EXPECT_FALSE(IsJsonInteger((*v)[3]));
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
  // What nlohmann itself would accept is refused by name.
  auto v = ParseJson("{\"a\": 1, \"b\": {\"a\": 2, \"a\": 3}}");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("duplicate key \"a\""));
  // A value may sit 32 levels down, not 33.
  v = ParseJson(std::string(32, '[') + "1" + std::string(32, ']'));
  EXPECT_TRUE(v.ok()) << v.status();
  v = ParseJson(std::string(33, '[') + "1" + std::string(33, ']'));
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("nesting deeper than 32"));
  // The position is that of the byte where the parser stopped: the newline after "tru".
  v = ParseJson("{\n  \"a\": 1,\n  \"b\": tru\n}");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("line 3, column 11"));
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

}  // namespace
}  // namespace triton
}  // namespace conv2d
