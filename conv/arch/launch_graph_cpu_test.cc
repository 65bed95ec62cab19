// LaunchRecording on the CPU: it is current only while it lives (nesting restores the outer one),
// copies each argument converted to its parameter's type at its alignment, refuses another
// stream, and says when it is full without keeping a partial launch.
#include "conv/arch/launch_graph.h"

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace conv2d {
namespace {

struct Big {
  double d[40];  // 320 bytes, 8-aligned
};
struct Huge {
  int c[250];  // 1000 bytes
};
struct alignas(16) Aligned {
  float v[4];
};

void KernelA(int, const float*, Big) {}
void KernelB(char, Aligned, unsigned long long) {}
void KernelNone() {}
void KernelHuge(int, Huge) {}

cudaStream_t StreamNumber(uintptr_t n) { return reinterpret_cast<cudaStream_t>(n); }

TEST(LaunchRecordingTest, CurrentWhileAliveAndNested) {
  EXPECT_EQ(LaunchRecording::Current(), nullptr);
  {
    LaunchRecording outer(StreamNumber(1));
    EXPECT_EQ(LaunchRecording::Current(), &outer);
    {
      LaunchRecording inner(StreamNumber(2));
      EXPECT_EQ(LaunchRecording::Current(), &inner);
    }
    EXPECT_EQ(LaunchRecording::Current(), &outer);
  }
  EXPECT_EQ(LaunchRecording::Current(), nullptr);
}

TEST(LaunchRecordingTest, CopiesConvertedArgumentsAtTheirAlignment) {
  LaunchRecording r(StreamNumber(7));
  Big big;
  for (int i = 0; i < 40; ++i) big.d[i] = i * 0.5;
  float data[2] = {};
  float* mutable_ptr = data;  // converted to the parameter's const float*
  ASSERT_EQ(r.Add(false, KernelA, dim3(3, 2), dim3(256), 1024, StreamNumber(7), 5, mutable_ptr,
                  big),
            cudaSuccess);
  big.d[0] = -1;  // the recording holds a copy
  Aligned a{{1, 2, 3, 4}};
  ASSERT_EQ(r.Add(true, KernelB, dim3(9), dim3(128), 0, StreamNumber(7), 'x', a, 42ull),
            cudaSuccess);
  ASSERT_EQ(r.Add(false, KernelNone, dim3(1), dim3(32), 0, StreamNumber(7)), cudaSuccess);
  ASSERT_EQ(r.size(), 3);

  const KernelLaunch& l0 = r[0];
  EXPECT_EQ(l0.kernel, reinterpret_cast<const void*>(&KernelA));
  EXPECT_EQ(l0.grid.x, 3u);
  EXPECT_EQ(l0.grid.y, 2u);
  EXPECT_EQ(l0.block.x, 256u);
  EXPECT_EQ(l0.smem, 1024u);
  EXPECT_FALSE(l0.pdl);
  ASSERT_EQ(l0.num_args, 3);
  EXPECT_EQ(*static_cast<const int*>(l0.args[0]), 5);
  EXPECT_EQ(*static_cast<const float* const*>(l0.args[1]), data);
  const Big* stored = static_cast<const Big*>(l0.args[2]);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(stored) % alignof(Big), 0u);
  EXPECT_EQ(stored->d[0], 0.0);
  EXPECT_EQ(stored->d[39], 19.5);

  const KernelLaunch& l1 = r[1];
  EXPECT_TRUE(l1.pdl);
  ASSERT_EQ(l1.num_args, 3);
  EXPECT_EQ(*static_cast<const char*>(l1.args[0]), 'x');
  EXPECT_EQ(reinterpret_cast<uintptr_t>(l1.args[1]) % 16, 0u);
  EXPECT_EQ(static_cast<const Aligned*>(l1.args[1])->v[3], 4.0f);
  EXPECT_EQ(*static_cast<const unsigned long long*>(l1.args[2]), 42ull);

  // Launch 1's values as bytes: the char, a zeroed gap up to the 16-aligned struct, the struct,
  // the 8-byte integer.
  ASSERT_EQ(r.arg_size(1), 40u);
  const unsigned char* bytes = r.arg_bytes(1);
  EXPECT_EQ(bytes[0], 'x');
  for (int i = 1; i < 16; ++i) EXPECT_EQ(bytes[i], 0) << i;
  EXPECT_EQ(bytes + 16, l1.args[1]);
  EXPECT_EQ(bytes + 32, l1.args[2]);
  EXPECT_EQ(r.arg_size(2), 0u);
  EXPECT_EQ(r[2].num_args, 0);
  EXPECT_FALSE(r.overflowed());
}

TEST(LaunchConfigTest, CarriesTheGeometryAndThePdlAttributeOnlyWhenAsked) {
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t pdl =
      LaunchConfig(dim3(7, 2), dim3(128), 4096, StreamNumber(3), true, &attribute);
  EXPECT_EQ(pdl.gridDim.x, 7u);
  EXPECT_EQ(pdl.gridDim.y, 2u);
  EXPECT_EQ(pdl.blockDim.x, 128u);
  EXPECT_EQ(pdl.dynamicSmemBytes, 4096u);
  EXPECT_EQ(pdl.stream, StreamNumber(3));
  ASSERT_EQ(pdl.numAttrs, 1u);
  EXPECT_EQ(pdl.attrs, &attribute);
  EXPECT_EQ(attribute.id, cudaLaunchAttributeProgrammaticStreamSerialization);
  EXPECT_EQ(attribute.val.programmaticStreamSerializationAllowed, 1);
  const cudaLaunchConfig_t plain =
      LaunchConfig(dim3(1), dim3(32), 0, StreamNumber(3), false, &attribute);
  EXPECT_EQ(plain.numAttrs, 0u);
}

TEST(LaunchRecordingTest, RefusesAnotherStream) {
  LaunchRecording r(StreamNumber(1));
  EXPECT_EQ(r.Add(false, KernelNone, dim3(1), dim3(1), 0, StreamNumber(2)),
            cudaErrorInvalidValue);
  EXPECT_EQ(r.size(), 0);
  EXPECT_FALSE(r.overflowed());
}

TEST(LaunchRecordingTest, FullByLaunchesOrBytesKeepsWhatFitAndSaysSo) {
  LaunchRecording by_count(nullptr);
  for (int i = 0; i < LaunchRecording::kMaxLaunches; ++i) {
    ASSERT_EQ(by_count.Add(false, KernelNone, dim3(1), dim3(1), 0, nullptr), cudaSuccess);
  }
  EXPECT_EQ(by_count.Add(false, KernelNone, dim3(1), dim3(1), 0, nullptr),
            cudaErrorMemoryAllocation);
  EXPECT_EQ(by_count.size(), LaunchRecording::kMaxLaunches);
  EXPECT_TRUE(by_count.overflowed());

  // ~1 KB a launch: the storage fills before the launch count does.
  static_assert(LaunchRecording::kStorageBytes / sizeof(Huge) < LaunchRecording::kMaxLaunches,
                "the test expects the bytes to run out first");
  LaunchRecording by_bytes(nullptr);
  Huge huge{};
  cudaError_t err = cudaSuccess;
  int added = 0;
  while ((err = by_bytes.Add(false, KernelHuge, dim3(1), dim3(1), 0, nullptr, 1, huge)) ==
         cudaSuccess) {
    ++added;
    ASSERT_LT(added, LaunchRecording::kMaxLaunches);
  }
  EXPECT_EQ(err, cudaErrorMemoryAllocation);
  EXPECT_EQ(added, static_cast<int>(LaunchRecording::kStorageBytes / (sizeof(Huge) + 4)));
  EXPECT_EQ(by_bytes.size(), added);  // the launch that did not fit is not kept
  EXPECT_TRUE(by_bytes.overflowed());
  for (int i = 0; i < added; ++i) {
    EXPECT_EQ(*static_cast<const int*>(by_bytes[i].args[0]), 1);
  }
}

}  // namespace
}  // namespace conv2d
