// The one failure path (src/runtime.h): a request that cannot fit beside the live tensors fails
// at once, holding no more; one that could waits for other threads' frees; PyTorch's
// statistics count only what the runtime served and took back, with its own sizes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

constexpr vmm::StreamHandle kSide = 0x1000;
constexpr vmm::StreamHandle kOther = 0x2000;

// Beyond the capacity, whatever is given back: refused before anything is released, created or
// waited for, and what the runtime held (idle pages included) is still held.
TEST(RuntimeFailurePath, ARequestBeyondTheCapacityFailsAtOnceHoldingNoMore) {
  auto driver = host_driver();
  Runtime rt(test_config("capacity:" + std::to_string(8 * kG)), *driver);
  void* live = rt.malloc(3 * kG, 0, 0);
  ASSERT_NE(live, nullptr);
  void* idle = rt.malloc(2 * kG, 0, 0);
  ASSERT_NE(idle, nullptr);
  rt.free(idle, 2 * kG, 0, 0);
  const RuntimeStats before = rt.stats();
  EXPECT_EQ(rt.malloc(6 * kG, 0, 0), nullptr);  // 3 live + 6 > 8
  const RuntimeStats after = rt.stats();
  EXPECT_TRUE(after.last_oom.beyond_capacity);
  EXPECT_NE(after.last_oom.reason.find("capacity of"), std::string::npos) << after.last_oom.reason;
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  EXPECT_EQ(after.driver.creates, before.driver.creates);
  EXPECT_EQ(after.driver.unmaps, before.driver.unmaps);
  EXPECT_EQ(after.ooms, before.ooms + 1);
  EXPECT_EQ(after.alloc_retries, 0u);
  // Within the capacity the same request is served from what was held.
  void* fits = rt.malloc(5 * kG, 0, 0);
  ASSERT_NE(fits, nullptr);
  rt.free(fits, 5 * kG, 0, 0);
  rt.free(live, 3 * kG, 0, 0);
}

// Sizes near the limits of 64-bit arithmetic, and larger than the device: refused at once,
// before matching (RuntimePolicy::max_request_bytes).
TEST(RuntimeFailurePath, ARequestLargerThanTheDeviceFailsAtOnce) {
  auto driver = host_driver(16 * kG);
  Runtime rt(test_config(""), *driver);
  for (std::size_t size : {std::size_t{17} * kG, SIZE_MAX, SIZE_MAX - 511, SIZE_MAX / 2 + 1}) {
    SCOPED_TRACE(size);
    EXPECT_EQ(rt.malloc(size, 0, 0), nullptr);
    EXPECT_TRUE(rt.stats().last_oom.beyond_capacity);
    EXPECT_NE(rt.stats().last_oom.reason.find(size <= (std::size_t{1} << 48) ? "device's" : "any device"),
              std::string::npos)
        << rt.stats().last_oom.reason;
  }
  EXPECT_EQ(rt.stats().driver.creates, 0u);
  EXPECT_EQ(rt.stats().reserved_bytes, 0u);
}

// The host emulation without max_bytes reports the machine's memory but keeps to no limit: only
// a configured capacity or a request no device holds fails at once there.
TEST(RuntimeFailurePath, AnEmulatedDeviceWithoutALimitBoundsOnlyTheRequest) {
  auto driver = host_driver();
  ASSERT_FALSE(driver->total_memory_enforced());
  Runtime rt(test_config(""), *driver);
  EXPECT_EQ(rt.malloc(SIZE_MAX - 511, 0, 0), nullptr);
  EXPECT_TRUE(rt.stats().last_oom.beyond_capacity);
  void* p = rt.malloc(3 * kG, 0, 0);
  ASSERT_NE(p, nullptr);
  rt.free(p, 3 * kG, 0, 0);
}

// Every page held by a live tensor of another stream: the request fits beside the live tensors
// but not in what is held, and waits for another thread to free one, then is served (the
// thread's free wakes it; nothing is served twice or matched again).
TEST(RuntimeFailurePath, ARequestWaitsForAnotherThreadsFree) {
  auto driver = host_driver();
  RuntimeConfig config = test_config("capacity:" + std::to_string(4 * kG));
  config.oom_wait_seconds = 30;
  Runtime rt(config, *driver);
  std::atomic<void*> a{nullptr};
  std::atomic<bool> freed{false};
  std::thread other([&] {
    a = rt.malloc(kG + kG / 2, 0, kSide);  // two pages of the side stream
    while (rt.stats().waiting_for_frees == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    freed = true;
    rt.free(a, kG + kG / 2, 0, kSide);
  });
  while (a.load() == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  void* c = rt.malloc(kG + kG / 2, 0, kOther);  // two pages of another stream: four held
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(rt.stats().reserved_bytes, 4 * kG);
  // 3 live + 1 fits the capacity; no page is free until the other thread frees.
  void* b = rt.malloc(kG, 0, 0);
  other.join();
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(freed.load());
  std::memset(b, 7, kG);
  const RuntimeStats s = rt.stats();
  EXPECT_EQ(s.alloc_retries, 1u);
  EXPECT_EQ(s.ooms, 0u);
  EXPECT_EQ(s.waiting_for_frees, 0u);
  EXPECT_LE(s.reserved_bytes, 4 * kG);
  rt.free(b, kG, 0, 0);
  rt.free(c, kG + kG / 2, 0, kOther);
}

// A request that fails with no other thread using the runtime does not wait.
TEST(RuntimeFailurePath, OneThreadAloneDoesNotWait) {
  auto driver = host_driver();
  RuntimeConfig config = test_config("capacity:" + std::to_string(2 * kG));
  config.oom_wait_seconds = 30;
  Runtime rt(config, *driver);
  void* a = rt.malloc(kG + kG / 2, 0, kSide);
  ASSERT_NE(a, nullptr);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(rt.malloc(kG / 2, 0, kOther), nullptr);
  EXPECT_FALSE(rt.stats().last_oom.beyond_capacity);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(rt.stats().alloc_retries, 0u);
  rt.free(a, kG + kG / 2, 0, kSide);
}

// PyTorch's statistics count only requests served and blocks taken back, with the sizes the
// runtime recorded: a double free, an unknown or interior pointer and a wrong size change none.
TEST(RuntimeFailurePath, RequestStatisticsNeverGoNegative) {
  auto driver = host_driver();
  Runtime rt(test_config(""), *driver);
  constexpr std::uint64_t kLarge = kSmallRequestBytes + 1;  // PyTorch's large pool
  void* small = rt.malloc(1000, 0, 0);
  void* large = rt.malloc(kLarge, 0, 0);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.requests.count[kAllRequests].current, 2u);
  EXPECT_EQ(s.requests.count[kSmallRequests].current, 1u);
  EXPECT_EQ(s.requests.count[kLargeRequests].current, 1u);
  EXPECT_EQ(s.requests.bytes[kAllRequests].current, 1000u + kLarge);
  rt.free(small, 5, 0, 0);  // the caller's size is wrong: the runtime's counts
  rt.free(small, 1000, 0, 0);
  rt.free(static_cast<char*>(large) + 64, kLarge, 0, 0);
  int on_stack = 0;
  rt.free(&on_stack, sizeof on_stack, 0, 0);
  s = rt.stats();
  EXPECT_EQ(s.invalid_frees, 3u);
  EXPECT_EQ(s.requests.count[kAllRequests].current, 1u);
  EXPECT_EQ(s.requests.count[kSmallRequests].current, 0u);
  EXPECT_EQ(s.requests.bytes[kAllRequests].current, kLarge);
  EXPECT_EQ(s.requests.bytes[kSmallRequests].freed, 1000u);
  rt.free(large, 1, 0, 0);
  s = rt.stats();
  EXPECT_EQ(s.requests.count[kAllRequests].current, 0u);
  EXPECT_EQ(s.requests.bytes[kAllRequests].current, 0u);
  EXPECT_EQ(s.requests.bytes[kAllRequests].peak, 1000u + kLarge);
  EXPECT_EQ(s.allocated_bytes, 0u);
  rt.reset_peak_stats();
  rt.reset_accumulated_stats();
  s = rt.stats();
  EXPECT_EQ(s.requests.bytes[kAllRequests].peak, 0u);
  EXPECT_EQ(s.requests.count[kAllRequests].allocated, 0u);
  EXPECT_EQ(s.requests.count[kAllRequests].freed, 0u);
}

// Each stream's arenas reserve address space in proportion to the memory the runtime may hold
// (RuntimePolicy::arena_limit_share), not a fixed 1 TiB: a thousand streams each get their small
// tensor (at 1 TiB a stream, the 128th would find no address space on a 47-bit device).
TEST(RuntimeFailurePath, AThousandStreamsEachGetTheirTensor) {
  auto driver = host_driver(1024 * kG);
  Runtime rt(test_config(""), *driver);
  std::vector<std::pair<void*, vmm::StreamHandle>> live;
  for (vmm::StreamHandle s = 1; s <= 1000; ++s) {
    void* p = rt.malloc(4096, 0, s * 0x100);
    ASSERT_NE(p, nullptr) << "stream " << s << ": " << rt.stats().last_oom.reason;
    std::memset(p, static_cast<int>(s & 0xff), 4096);
    live.emplace_back(p, s * 0x100);
  }
  for (const auto& [p, s] : live) rt.free(p, 4096, 0, s);
  EXPECT_EQ(rt.stats().allocated_bytes, 0u);
  EXPECT_EQ(rt.stats().ooms, 0u);
}

}  // namespace
}  // namespace stalloc
