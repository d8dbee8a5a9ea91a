#include <gtest/gtest.h>

#include <cstring>

#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

TEST(RuntimeOom, ReturnsNullptrWithTheReasonAndKeepsServing) {
  auto driver = host_driver();
  Runtime rt(test_config("capacity:" + std::to_string(4 * kG)), *driver);
  void* big = rt.malloc(10 * kG, 0, 0);
  EXPECT_EQ(big, nullptr);
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.ooms, 1u);
  EXPECT_EQ(s.last_oom.requested_bytes, 10 * kG);
  EXPECT_EQ(s.last_oom.capacity_bytes, 4 * kG);
  EXPECT_LE(s.last_oom.reserved_bytes, 4 * kG);
  EXPECT_NE(s.last_oom.reason.find("capacity"), std::string::npos) << s.last_oom.reason;
  EXPECT_LE(s.reserved_bytes, 4 * kG);

  void* a = rt.malloc(2 * kG, 0, 0);
  void* b = rt.malloc(kG, 0, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::memset(a, 1, 2 * kG);
  EXPECT_EQ(rt.malloc(2 * kG, 0, 0), nullptr);
  rt.free(a, 2 * kG, 0, 0);
  void* c = rt.malloc(2 * kG, 0, 0);
  EXPECT_NE(c, nullptr);
  rt.free(b, kG, 0, 0);
  rt.free(c, 2 * kG, 0, 0);
  EXPECT_EQ(rt.stats().ooms, 2u);
  EXPECT_EQ(rt.stats().allocated_bytes, 0u);
}

// A request that fits beside the live tensors (1 byte + 2 granules + 1 <= 3 granules) but needs
// more chunks than the driver has (one held by the first stream's page, three for the other's).
TEST(RuntimeOom, DriverOutOfMemoryIsReportedToo) {
  auto driver = host_driver(3 * kG);
  Runtime rt(test_config(""), *driver);
  void* held = rt.malloc(1, 0, 0);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(rt.malloc(2 * kG + 1, 0, 0x1000), nullptr);
  EXPECT_FALSE(rt.stats().last_oom.beyond_capacity);
  EXPECT_NE(rt.stats().last_oom.reason.find("cuMemCreate"), std::string::npos)
      << rt.stats().last_oom.reason;
  rt.free(held, 1, 0, 0);
  void* p = rt.malloc(kG, 0, 0);
  EXPECT_NE(p, nullptr);
  rt.free(p, kG, 0, 0);
}

TEST(RuntimeOom, MemoryFractionLowersTheCapacity) {
  auto driver = host_driver();
  Runtime rt(test_config("capacity:" + std::to_string(8 * kG)), *driver);
  rt.set_memory_fraction(0.5);
  EXPECT_EQ(rt.malloc(5 * kG, 0, 0), nullptr);
  EXPECT_EQ(rt.stats().last_oom.capacity_bytes, 4 * kG);
  EXPECT_THROW(rt.set_memory_fraction(1.5), UsageError);
}

// Without a configured capacity the fraction is of the device's memory (the host driver's
// max_bytes here).
TEST(RuntimeOom, MemoryFractionOfTheDeviceWithoutACapacity) {
  auto driver = host_driver(16 * kG);
  std::size_t total = 0;
  ASSERT_EQ(driver->total_memory(&total), vmm::Status::Success);
  EXPECT_EQ(total, 16 * kG);
  Runtime rt(test_config(""), *driver);
  void* p = rt.malloc(6 * kG, 0, 0);
  ASSERT_NE(p, nullptr);
  rt.free(p, 6 * kG, 0, 0);
  rt.set_memory_fraction(0.25);
  rt.empty_cache();
  EXPECT_EQ(rt.malloc(5 * kG, 0, 0), nullptr);
  EXPECT_EQ(rt.stats().last_oom.capacity_bytes, 4 * kG);
  void* q = rt.malloc(3 * kG, 0, 0);
  EXPECT_NE(q, nullptr);
  rt.free(q, 3 * kG, 0, 0);
}

// A fraction so small that the cap rounds to 0 bytes allows nothing (0 would mean no cap).
TEST(RuntimeOom, ATinyMemoryFractionAllowsNothing) {
  auto driver = host_driver();
  Runtime rt(test_config("capacity:" + std::to_string(8 * kG)), *driver);
  rt.set_memory_fraction(1e-30);
  EXPECT_EQ(rt.malloc(4096, 0, 0), nullptr);
  EXPECT_EQ(rt.stats().last_oom.capacity_bytes, 1u);
  EXPECT_EQ(rt.stats().reserved_bytes, 0u);
  rt.set_memory_fraction(1.0);
  void* p = rt.malloc(4096, 0, 0);
  EXPECT_NE(p, nullptr);
  rt.free(p, 4096, 0, 0);
}

TEST(RuntimeOom, AnotherDeviceIsRefused) {
  auto driver = host_driver();
  Runtime rt(test_config(""), *driver);
  EXPECT_EQ(rt.malloc(kG, 3, 0), nullptr);
  EXPECT_NE(rt.stats().last_oom.reason.find("device 3"), std::string::npos);
}

}  // namespace
}  // namespace stalloc
