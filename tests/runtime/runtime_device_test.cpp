// What the runtime asks of the device beyond memory: access for peer devices (peer_access) and
// one device synchronisation before it gives up on memory the GPU may still use.
#include <gtest/gtest.h>

#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

std::unique_ptr<vmm::Driver> four_device_driver(int device) {
  vmm::HostDriverOptions options;
  options.granularity = kG;
  options.device = device;
  options.devices = 4;
  options.lag = lag_from_environment();
  return vmm::make_host_driver(options);
}

// peer_access:all: each access call covers the three other devices too, so the bytes it covers
// are four times those of the same work without it.
TEST(RuntimeDevice, PeerAccessGivesEveryOtherDeviceAccess) {
  std::uint64_t covered[2] = {};
  for (int all = 0; all < 2; ++all) {
    auto driver = four_device_driver(2);
    Runtime rt(test_config(all != 0 ? "peer_access:all" : "peer_access:none"), *driver);
    void* p = rt.malloc(5 * kG, 2, 0);
    ASSERT_NE(p, nullptr);
    rt.free(p, 5 * kG, 2, 0);
    covered[all] = driver->counters().set_access_bytes;
  }
  EXPECT_GT(covered[0], 0u);
  EXPECT_EQ(covered[1], 4 * covered[0]);
}

TEST(RuntimeDevice, PeerAccessOnADriverWithoutPeersIsAnEmptyList) {
  auto driver = four_device_driver(0);
  RuntimeConfig config = test_config("peer_access:all");
  EXPECT_TRUE(config.peer_access);
  vmm::HostDriverOptions alone;
  alone.granularity = kG;
  auto single = vmm::make_host_driver(alone);
  Runtime rt(config, *single);
  void* p = rt.malloc(kG, 0, 0);
  ASSERT_NE(p, nullptr);
  rt.free(p, kG, 0, 0);
  EXPECT_EQ(single->counters().set_access_bytes, kG);
}

// Memory freed on one stream and wanted on another at the capacity waits for GPU work that,
// on this driver, no number of queries completes: one synchronisation, then it is served.
TEST(RuntimeDevice, AtTheCapacityTheRuntimeSynchronizesOnceRatherThanFail) {
  vmm::HostDriverOptions options;
  options.granularity = kG;
  options.lag.queries = 1u << 30;
  auto driver = vmm::make_host_driver(options);
  Runtime rt(test_config("capacity:" + std::to_string(4 * kG)), *driver);
  void* a = rt.malloc(4 * kG, 0, 0x1000);
  ASSERT_NE(a, nullptr);
  rt.free(a, 4 * kG, 0, 0x1000);
  EXPECT_EQ(driver->counters().synchronizes, 0u);
  void* b = rt.malloc(4 * kG, 0, 0x2000);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(driver->counters().synchronizes, 1u);
  rt.free(b, 4 * kG, 0, 0x2000);
}

}  // namespace
}  // namespace stalloc
