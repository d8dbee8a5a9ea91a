// The C ABI PyTorch's CUDAPluggableAllocator calls, on the host backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>

extern "C" {
int stalloc_configure(const char* conf, char* error, std::size_t error_size);
void* stalloc_malloc(std::size_t size, int device, void* stream);
void stalloc_free(void* ptr, std::size_t size, int device, void* stream);
}

namespace {

// The runtimes are process-wide, configured once before the first allocation: one test.
// PyTorch does not check the pointer an allocator returns, so a failed allocation must raise
// (with the reason) instead of returning nullptr; every device gets a runtime of its own (a
// runtime made for device 0 refuses device 1's requests, which under torchrun left every rank
// but the first without memory).
TEST(PluggableAllocator, DevicesGetTheirOwnRuntimeAndAFailedAllocationRaises) {
  char error[256] = {};
  ASSERT_EQ(stalloc_configure("backend:host,granularity:65536,capacity:4MiB", error, sizeof error),
            0)
      << error;
  for (int device : {0, 1, 3}) {
    SCOPED_TRACE("device " + std::to_string(device));
    void* p = stalloc_malloc(100000, device, nullptr);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5A, 100000);
    try {
      stalloc_malloc(std::size_t{64} << 20, device, nullptr);
      ADD_FAILURE() << "an allocation past the capacity returned";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), testing::HasSubstr("out of memory"));
      EXPECT_THAT(e.what(), testing::HasSubstr("device " + std::to_string(device)));
    }
    stalloc_free(p, 100000, device, nullptr);
  }
}

}  // namespace
