// What the Triton runtime's tests share: the in-tree artifacts (conv/algorithms/triton's two
// igemm_conv kernels) with their signature and arguments, and the edits the tests make to
// copies of them (a metadata key removed or a string replaced, bytes poked into a cubin).
#ifndef CONV2D_CONV_TRITON_TEST_ARTIFACTS_H_
#define CONV2D_CONV_TRITON_TEST_ARTIFACTS_H_

#include <cstring>
#include <string>
#include <vector>

#include "conv/algorithms/triton/igemm_artifacts.h"
#include "conv/triton/triton_kernel.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace triton {

inline constexpr char kWide[] = "igemm_conv_m128_n64";
inline constexpr char kNarrow[] = "igemm_conv_m64_n32";

inline std::vector<ArgType> IgemmSignature() {
  std::vector<ArgType> s(3, ArgType::kPointer);
  s.insert(s.end(), 10, ArgType::kI32);
  return s;
}

inline KernelArgs IgemmArgs() {
  KernelArgs a;
  a.Pointer(nullptr).Pointer(nullptr).Pointer(nullptr);
  for (int i = 0; i < 10; ++i) a.I32(i + 1);
  return a;
}

inline KernelImage Image(const char* base) {
  auto image = ImageFromEmbedded(IgemmConvArtifacts(), base);
  EXPECT_TRUE(image.ok()) << image.status();
  return *image;
}

// Removes a top-level key from the metadata JSON tools/triton_compile.py writes (one space of
// indentation per level, keys sorted).
inline std::string RemoveKey(std::string json, const std::string& key) {
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

inline std::string Replace(std::string s, const std::string& from, const std::string& to) {
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

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_TEST_ARTIFACTS_H_
