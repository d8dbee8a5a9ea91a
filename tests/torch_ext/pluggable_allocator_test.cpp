// The C ABI PyTorch's CUDAPluggableAllocator calls, on the host backend.
//
// The runtimes are process-wide, configured once before the first allocation (the environment
// below): each test uses devices of its own, so that the tests also pass in one process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <regex>
#include <stdexcept>
#include <string>
#include <utility>

#include "tests/torch_ext/c_abi.h"

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;
// Events complete after this many queries: a free's memory is not reusable by another stream
// until the runtime has asked often enough, as on a GPU still running the kernels before it.
constexpr unsigned kLagQueries = 8;

class Configured : public testing::Environment {
 public:
  void SetUp() override {
    char error[256] = {};
    ASSERT_EQ(stalloc_set_host_lag(kLagQueries, 0, error, sizeof error), 0) << error;
    ASSERT_EQ(stalloc_configure("backend:host,granularity:65536,capacity:4MiB", error, sizeof error), 0)
        << error;
    stalloc_set_oom_wait(0.2);
  }
};
const testing::Environment* const kConfigured = testing::AddGlobalTestEnvironment(new Configured);

void* stream(std::uintptr_t n) { return reinterpret_cast<void*>(n); }

std::string stats_json() {
  std::string json(stalloc_stats_json(nullptr, 0), '\0');
  EXPECT_EQ(stalloc_stats_json(json.data(), json.size() + 1), json.size());
  return json;
}

// A number in the stats JSON: the first `"key":N` after `"section":{..."device":{` (a crude
// reader, enough for flat fields of one device).
std::uint64_t stat(const std::string& section, int device, const std::string& key) {
  const std::string json = stats_json();
  std::size_t at = json.find('"' + section + "\":{");
  EXPECT_NE(at, std::string::npos) << json;
  at = json.find('"' + std::to_string(device) + "\":{", at);
  EXPECT_NE(at, std::string::npos) << json;
  at = json.find('"' + key + "\":", at);
  EXPECT_NE(at, std::string::npos) << key << " in " << json;
  return std::stoull(json.substr(at + key.size() + 3));
}

// PyTorch does not check the pointer an allocator returns, so a failed allocation must raise
// (with the reason) instead of returning nullptr; every device gets a runtime of its own (a
// runtime made for device 0 refuses device 1's requests, which under torchrun left every rank
// but the first without memory). The message starts as PyTorch's does.
TEST(PluggableAllocator, DevicesGetTheirOwnRuntimeAndAFailedAllocationRaises) {
  for (int device : {0, 1, 3}) {
    SCOPED_TRACE("device " + std::to_string(device));
    void* p = stalloc_malloc(100000, device, nullptr);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5A, 100000);
    try {
      stalloc_malloc(std::size_t{64} << 20, device, nullptr);
      ADD_FAILURE() << "an allocation past the capacity returned";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_THAT(what, testing::StartsWith("CUDA out of memory. Tried to allocate 64.00 MiB. GPU " +
                                            std::to_string(device) + ": stalloc holds "));
      EXPECT_THAT(what, testing::HasSubstr("capacity of 4.00 MiB"));
      EXPECT_THAT(what, testing::HasSubstr("Reason: "));
      // Beyond the capacity whatever the GPU frees: raised at once.
      EXPECT_THAT(what, testing::HasSubstr("Not retried"));
    }
    EXPECT_EQ(stat("pytorch", device, "num_ooms"), 1u);
    EXPECT_EQ(stat("pytorch", device, "num_alloc_retries"), 0u);
    stalloc_free(p, 100000, device, nullptr);
  }
}

// An empty tensor: a null pointer and no memory, as PyTorch's own allocator; its free and a
// record_stream on it do nothing, and it is not counted.
TEST(PluggableAllocator, ZeroBytesGetANullPointerAndNoMemory) {
  constexpr int kDevice = 5;
  void* warm = stalloc_malloc(4096, kDevice, nullptr);
  ASSERT_NE(warm, nullptr);
  const std::uint64_t allocations = stat("devices", kDevice, "allocations");
  EXPECT_EQ(stalloc_malloc(0, kDevice, nullptr), nullptr);
  EXPECT_EQ(stalloc_malloc(0, kDevice, stream(0x10)), nullptr);
  stalloc_record_stream(nullptr, stream(0x10));
  stalloc_free(nullptr, 0, kDevice, nullptr);
  EXPECT_EQ(stat("devices", kDevice, "allocations"), allocations);
  EXPECT_EQ(stat("devices", kDevice, "invalid_frees"), 0u);
  stalloc_free(warm, 4096, kDevice, nullptr);
}

// Pages freed on one stream go to another stream's arena only after their events complete.
// With lagging events the capacity (four chunks here) is reached while the chunk the other
// stream freed is still in use by its kernels; before failing, the runtime polls those events
// as waiting for the GPU would (the runtime's failure path, RuntimeReclaimer::after_failure), so
// the request is served at once: no error, no wait for other threads' frees, and no
// out-of-memory counted. (Waiting for other threads' frees: tests/runtime/
// runtime_failure_path_test.cpp.)
TEST(PluggableAllocator, AFailedAllocationWaitsForPendingFrees) {
  constexpr int kDevice = 7;
  constexpr std::size_t kPage = 64 * kKiB;
  stalloc_set_memory_fraction(1.0 / 16, kDevice);  // 4 MiB / 16: four chunks
  void* a = stalloc_malloc(kPage, kDevice, stream(0x10));
  ASSERT_NE(a, nullptr);
  stalloc_free(a, kPage, kDevice, stream(0x10));
  void* b = nullptr;
  try {
    b = stalloc_malloc(4 * kPage, kDevice, stream(0x20));
  } catch (const std::exception& e) {
    FAIL() << e.what();
  }
  ASSERT_NE(b, nullptr);
  std::memset(b, 0x11, 4 * kPage);
  EXPECT_EQ(stat("pytorch", kDevice, "num_alloc_retries"), 0u);
  EXPECT_EQ(stat("pytorch", kDevice, "num_ooms"), 0u);
  EXPECT_EQ(stat("devices", kDevice, "ooms"), 0u);
  stalloc_free(b, 4 * kPage, kDevice, stream(0x20));
}

struct FakeTorchOutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void throw_fake_torch_oom(const char* message) { throw FakeTorchOutOfMemory(message); }

// libstalloc_torch_oom.so registers a thrower of c10::OutOfMemoryError (Python:
// torch.cuda.OutOfMemoryError); the failed allocation raises through it with the same message.
TEST(PluggableAllocator, TheRegisteredThrowerRaisesTheOutOfMemoryError) {
  constexpr int kDevice = 9;
  stalloc_set_oom_thrower(&throw_fake_torch_oom);
  try {
    stalloc_malloc(5 * kMiB, kDevice, nullptr);
    ADD_FAILURE() << "an allocation past the capacity returned";
  } catch (const FakeTorchOutOfMemory& e) {
    EXPECT_THAT(e.what(), testing::StartsWith("CUDA out of memory. Tried to allocate 5.00 MiB. GPU 9"));
  }
  stalloc_set_oom_thrower(nullptr);
  EXPECT_THROW(stalloc_malloc(5 * kMiB, kDevice, nullptr), std::runtime_error);
  EXPECT_EQ(stat("pytorch", kDevice, "num_ooms"), 2u);
}

// PyTorch's counters: allocations and requested bytes, current, peak, allocated and freed in all,
// per pool (small: up to 1 MiB); the resets of torch.cuda.reset_peak_memory_stats and
// reset_accumulated_memory_stats.
TEST(PluggableAllocator, PyTorchCountersPerPoolAndTheirResets) {
  constexpr int kDevice = 11;
  void* small = stalloc_malloc(1000, kDevice, nullptr);
  void* large = stalloc_malloc(2 * kMiB, kDevice, nullptr);
  void* large2 = stalloc_malloc(kMiB + 1, kDevice, nullptr);
  ASSERT_TRUE(small != nullptr && large != nullptr && large2 != nullptr);
  stalloc_free(large2, kMiB + 1, kDevice, nullptr);
  const std::string json = stats_json();
  const std::string all_bytes = "\"requested_bytes\":{\"all\":{\"current\":" +
                                std::to_string(1000 + 2 * kMiB) + ",\"peak\":" +
                                std::to_string(1000 + 3 * kMiB + 1) + ",\"allocated\":" +
                                std::to_string(1000 + 3 * kMiB + 1) + ",\"freed\":" +
                                std::to_string(kMiB + 1) + "}";
  EXPECT_THAT(json, testing::HasSubstr(all_bytes));
  EXPECT_THAT(json, testing::HasSubstr(
                        "\"allocation\":{\"all\":{\"current\":2,\"peak\":3,\"allocated\":3,\"freed\":1},"
                        "\"small_pool\":{\"current\":1,\"peak\":1,\"allocated\":1,\"freed\":0},"
                        "\"large_pool\":{\"current\":1,\"peak\":2,\"allocated\":2,\"freed\":1}}"));
  EXPECT_EQ(stat("devices", kDevice, "allocated_bytes"), 1000 + 2 * kMiB);

  stalloc_reset_peak_stats(kDevice);
  EXPECT_THAT(stats_json(), testing::HasSubstr("\"allocation\":{\"all\":{\"current\":2,\"peak\":2,"));
  EXPECT_EQ(stat("devices", kDevice, "peak_allocated_bytes"), 1000 + 2 * kMiB);
  stalloc_reset_accumulated_stats(kDevice);
  EXPECT_THAT(stats_json(), testing::HasSubstr(
                                "\"allocation\":{\"all\":{\"current\":2,\"peak\":2,\"allocated\":0,\"freed\":0}"));
  stalloc_free(small, 1000, kDevice, nullptr);
  stalloc_free(large, 2 * kMiB, kDevice, nullptr);
}

// record_stream reaches the runtime that served the pointer only. It used to be given to every
// device's runtime, which took another device's streams for its own: with 70 of them, a real
// stream of its own then shared the last bit of the 64-stream mask with them, and reusing bytes
// that stream had used waited on every one of them.
TEST(PluggableAllocator, RecordStreamReachesTheOwningRuntimeOnly) {
  constexpr int kA = 20;
  constexpr int kB = 21;
  void* a = stalloc_malloc(100000, kA, nullptr);
  void* b0 = stalloc_malloc(100000, kB, nullptr);
  ASSERT_TRUE(a != nullptr && b0 != nullptr);
  for (std::uintptr_t s = 1; s <= 70; ++s) stalloc_record_stream(a, stream(0x1000 + s));
  // Device B: bytes used by a side stream as well, freed and reused on the default stream, wait
  // for that side stream once.
  void* b = stalloc_malloc(200000, kB, nullptr);
  ASSERT_NE(b, nullptr);
  stalloc_record_stream(b, stream(0x9000));
  stalloc_free(b, 200000, kB, nullptr);
  void* again = stalloc_malloc(200000, kB, nullptr);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(stat("devices", kB, "stream_waits"), 1u);
  EXPECT_EQ(stat("devices", kB, "invalid_frees"), 0u);
  stalloc_free(again, 200000, kB, nullptr);
  stalloc_free(b0, 100000, kB, nullptr);
  stalloc_free(a, 100000, kA, nullptr);
}

// CUDA graph capture: PyTorch 2.3+ calls this hook (set_begin_allocate_to_pool) before the
// capture begins; stalloc refuses it with the reason.
TEST(PluggableAllocator, GraphCaptureIsRefusedBeforeItBegins) {
  using Begin = void(int, std::pair<unsigned long long, unsigned long long>,
                     std::function<bool(struct CUstream_st*)>);
  auto* begin = reinterpret_cast<Begin*>(stalloc_begin_allocate_to_pool_address());
  ASSERT_NE(begin, nullptr);
  try {
    begin(0, {1, 0}, [](struct CUstream_st*) { return true; });
    ADD_FAILURE() << "a capture was let through";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("CUDA graph capture is not supported"));
  }
}

// The free names another device than the allocation's: the runtime that served the pointer
// takes it back (counted there, nothing leaked, no invalid free anywhere).
TEST(PluggableAllocator, AFreeNamingAnotherDeviceReachesTheRuntimeThatServedIt) {
  constexpr int kDevice = 11;
  void* p = stalloc_malloc(3000, kDevice, nullptr);
  ASSERT_NE(p, nullptr);
  void* q = stalloc_malloc(3000, kDevice + 1, nullptr);
  ASSERT_NE(q, nullptr);
  stalloc_free(p, 3000, kDevice + 1, nullptr);
  EXPECT_EQ(stat("devices", kDevice, "invalid_frees"), 0u);
  EXPECT_EQ(stat("devices", kDevice + 1, "invalid_frees"), 0u);
  EXPECT_EQ(stat("devices", kDevice, "allocated_bytes"), 0u);
  EXPECT_EQ(stat("devices", kDevice + 1, "allocated_bytes"), 3000u);
  stalloc_free(q, 3000, kDevice + 1, nullptr);
  EXPECT_EQ(stat("devices", kDevice + 1, "allocated_bytes"), 0u);
}

// A device index no runtime can serve: the message says so (nothing was printed before).
TEST(PluggableAllocator, ADeviceOutOfRangeIsNamed) {
  try {
    stalloc_malloc(4096, 64, nullptr);
    ADD_FAILURE() << "an allocation on device 64 returned";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("no such device"));
  }
}

}  // namespace
