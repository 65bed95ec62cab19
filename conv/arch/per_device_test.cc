// PerDevice makes each device's value once, keeps devices apart, and is safe from many threads
// (the lock-free read of a made value included), also for ordinals past the fast table.
#include "conv/arch/per_device.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace conv2d {
namespace {

TEST(PerDeviceTest, EachDeviceGetsItsOwnValueMadeOnce) {
  PerDevice<int> values;
  int made = 0;
  EXPECT_EQ(values.Get(0, [&] { ++made; return 10; }), 10);
  EXPECT_EQ(values.Get(1, [&] { ++made; return 11; }), 11);
  EXPECT_EQ(values.Get(0, [&] { ++made; return 99; }), 10);  // not made again
  EXPECT_EQ(values.Get(1, [&] { ++made; return 99; }), 11);
  EXPECT_EQ(made, 2);
}

TEST(PerDeviceTest, ManyThreadsMakeEachValueOnce) {
  PerDevice<int> values;
  std::atomic<int> made{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        const int device = (t + i) % 4;
        EXPECT_EQ(values.Get(device, [&] { ++made; return 100 + device; }), 100 + device);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(made.load(), 4);
}

TEST(PerDeviceTest, OrdinalsPastTheFastTableWork) {
  PerDevice<int> values;
  EXPECT_EQ(values.Get(100, [] { return 7; }), 7);
  EXPECT_EQ(values.Get(100, [] { return 8; }), 7);
  EXPECT_EQ(values.Get(63, [] { return 9; }), 9);
}

}  // namespace
}  // namespace conv2d
