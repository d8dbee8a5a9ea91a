// Rules only the host backend can show: page protection before and after set_access, its
// limits (max_mappings, max_bytes), its bookkeeping of released-but-mapped chunks, and how chunks
// are backed (slices of a few memfds, hole-punched when their memory goes).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "tests/vmm/vmm_test_support.h"
#include "vmm/chunk_pool.h"
#include "vmm/driver_factory.h"
#include "vmm/host_driver.h"
#include "vmm/mapping.h"
#include "vmm/physical_chunk.h"
#include "vmm/va_reservation.h"
#include "vmm/vmm_error.h"

namespace stalloc::vmm {
namespace {

using testing::kHostTestGranularity;
using testing::host_driver_memfds;
using testing::MemfdUsage;
using testing::process_areas;
using testing::protection_of;

constexpr std::size_t G = kHostTestGranularity;

// The file offset column of /proc/self/maps for the area that starts at address.
std::string file_offset_of(std::uintptr_t address) {
  const testing::MapsLine m = testing::maps_line_of(address);
  return m.start == address ? m.offset : "";
}

// Lowers the soft limit on open files for one test, and puts it back.
class OpenFileLimit {
 public:
  explicit OpenFileLimit(rlim_t soft) {
    getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min(soft, saved_.rlim_cur);
    setrlimit(RLIMIT_NOFILE, &lowered);
  }
  ~OpenFileLimit() { setrlimit(RLIMIT_NOFILE, &saved_); }
  OpenFileLimit(const OpenFileLimit&) = delete;
  OpenFileLimit& operator=(const OpenFileLimit&) = delete;

  static rlim_t current() {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    return limit.rlim_cur;
  }

 private:
  rlimit saved_{};
};

std::unique_ptr<Driver> host(std::size_t max_mappings = 0, std::size_t max_bytes = 0) {
  HostDriverOptions options;
  options.granularity = G;
  options.max_mappings = max_mappings;
  options.max_bytes = max_bytes;
  return make_host_driver(options);
}

TEST(HostDriver, RangeIsInaccessibleUntilSetAccess) {
  auto driver = host();
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver, 2 * G, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, 4 * G, 0, &range), Status::Success);
  EXPECT_EQ(protection_of(range.base()), "---p") << "a reservation is a placeholder";

  Mapping mapping;
  ASSERT_EQ(Mapping::map(*driver, range.base() + G, 2 * G, 0, chunk.handle(), &mapping),
            Status::Success);
  EXPECT_EQ(protection_of(mapping.ptr()), "---s") << "mapped, but no access granted yet";
  EXPECT_EQ(protection_of(mapping.ptr() + G), "---s");
  EXPECT_EQ(protection_of(range.base()), "---p");

  ASSERT_EQ(mapping.set_access(Access::Read), Status::Success);
  EXPECT_EQ(protection_of(mapping.ptr()), "r--s");
  ASSERT_EQ(mapping.set_access(Access::ReadWrite), Status::Success);
  EXPECT_EQ(protection_of(mapping.ptr() + G), "rw-s");

  ASSERT_EQ(mapping.reset(), Status::Success);
  EXPECT_EQ(protection_of(range.base() + G), "---p") << "unmap puts the placeholder back";
  ASSERT_EQ(range.reset(), Status::Success);
  EXPECT_EQ(protection_of(range.base()), "");
}

TEST(HostDriver, SetAccessNeedsWholeMappedRanges) {
  auto driver = host();
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver, 2 * G, &chunk), Status::Success);
  PhysicalChunk small;
  ASSERT_EQ(PhysicalChunk::create(*driver, G, &small), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, 4 * G, 0, &range), Status::Success);
  Mapping a;
  Mapping b;
  ASSERT_EQ(Mapping::map(*driver, range.base(), 2 * G, 0, chunk.handle(), &a), Status::Success);
  ASSERT_EQ(Mapping::map(*driver, range.base() + 2 * G, G, 0, small.handle(), &b),
            Status::Success);
  EXPECT_EQ(driver->set_access(range.base(), 4 * G, Access::ReadWrite), Status::InvalidValue)
      << "the last granule is not mapped";
  EXPECT_EQ(driver->set_access(range.base(), G, Access::ReadWrite), Status::InvalidValue)
      << "half of a mapping";
  EXPECT_EQ(driver->set_access(range.base(), 3 * G, Access::ReadWrite), Status::Success)
      << "two mappings back to back";
  EXPECT_EQ(driver->counters().set_accesses, 1u);
}

TEST(HostDriver, MapOntoMappedPagesIsRefused) {
  auto driver = host();
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver, 2 * G, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, 4 * G, 0, &range), Status::Success);
  Mapping mapping;
  ASSERT_EQ(Mapping::map(*driver, range.base() + G, 2 * G, 0, chunk.handle(), &mapping),
            Status::Success);
  EXPECT_EQ(driver->map(range.base(), 2 * G, 0, chunk.handle()), Status::InvalidValue);
  EXPECT_EQ(driver->map(range.base() + 2 * G, 2 * G, 0, chunk.handle()), Status::InvalidValue);
  EXPECT_EQ(driver->free_reservation(range.base(), range.size()), Status::InvalidValue)
      << "a mapping is still inside";
  PhysicalChunk small;
  ASSERT_EQ(PhysicalChunk::create(*driver, G, &small), Status::Success);
  EXPECT_EQ(driver->map(range.base(), G, 0, small.handle()), Status::Success);
  EXPECT_EQ(driver->unmap(range.base(), G), Status::Success);
}

// As CUDA (seen on an H200, driver 580): a handle is mapped whole, never a part of it.
TEST(HostDriver, APartOfAChunkIsNotMapped) {
  auto driver = host();
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver, 2 * G, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, 2 * G, 0, &range), Status::Success);
  EXPECT_EQ(driver->map(range.base(), G, 0, chunk.handle()), Status::NotSupported);
  EXPECT_EQ(driver->counters().live_mappings, 0u);
}

TEST(HostDriver, MaxMappingsReturnsOutOfMemory) {
  auto driver = host(3);
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver, G, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, 4 * G, 0, &range), Status::Success);
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(driver->map(range.base() + i * G, G, 0, chunk.handle()), Status::Success);
  }
  EXPECT_EQ(driver->map(range.base() + 3 * G, G, 0, chunk.handle()), Status::OutOfMemory);
  EXPECT_EQ(driver->counters().live_mappings, 3u);
  ASSERT_EQ(driver->unmap(range.base(), G), Status::Success);
  EXPECT_EQ(driver->map(range.base() + 3 * G, G, 0, chunk.handle()), Status::Success);
  for (std::size_t i = 1; i < 4; ++i) {
    ASSERT_EQ(driver->unmap(range.base() + i * G, G), Status::Success);
  }
}

// The driver budgets kernel memory areas as one per mapping plus one per unmapped run of a
// reservation. Mapping a reservation's chunks in a scattered order, then unmapping every other
// one: the kernel never holds more areas than that count, and a reservation mapped edge to edge
// holds one per mapping.
TEST(HostDriver, KernelAreasStayWithinTheDriversCount) {
  constexpr std::size_t kPages = 48;
  auto driver = host();
  std::vector<PhysicalChunk> chunks(kPages);
  for (auto& c : chunks) ASSERT_EQ(PhysicalChunk::create(*driver, G, &c), Status::Success);
  std::vector<bool> mapped(kPages, false);
  auto model = [&] {
    std::size_t areas = 0;
    for (std::size_t i = 0; i < kPages; ++i) {
      if (mapped[i] || i == 0 || mapped[i - 1]) areas += 1;
    }
    return areas;
  };
  const std::size_t before = process_areas();
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, kPages * G, 0, &range), Status::Success);
  EXPECT_LE(process_areas() - before, model());
  for (std::size_t k = 0; k < kPages; ++k) {
    const std::size_t i = (k * 7 + 3) % kPages;  // 7 is coprime with 48: every page once
    ASSERT_EQ(driver->map(range.base() + i * G, G, 0, chunks[i].handle()), Status::Success);
    ASSERT_EQ(driver->set_access(range.base() + i * G, G, Access::ReadWrite), Status::Success);
    mapped[i] = true;
    EXPECT_LE(process_areas() - before, model()) << "after mapping page " << i;
  }
  EXPECT_EQ(model(), kPages);
  for (std::size_t i = 0; i < kPages; i += 2) {
    ASSERT_EQ(driver->unmap(range.base() + i * G, G), Status::Success);
    mapped[i] = false;
    EXPECT_LE(process_areas() - before, model()) << "after unmapping page " << i;
  }
  for (std::size_t i = 1; i < kPages; i += 2) {
    ASSERT_EQ(driver->unmap(range.base() + i * G, G), Status::Success);
  }
}

TEST(HostDriver, MaxBytesReturnsOutOfMemoryAndChunkPoolCleansUp) {
  auto driver = host(0, 3 * G);
  EXPECT_THROW(
      {
        try {
          ChunkPool pool(*driver, 4);
        } catch (const VmmError& e) {
          EXPECT_EQ(e.status(), Status::OutOfMemory);
          throw;
        }
      },
      VmmError);
  EXPECT_EQ(driver->counters().live_chunks, 0u);
  EXPECT_EQ(driver->counters().chunk_bytes, 0u);
  EXPECT_EQ(driver->counters().peak_chunk_bytes, 3 * G);
  ChunkPool pool(*driver, 3);
  EXPECT_EQ(pool.created(), 3u);
}

TEST(HostDriver, ReleasedChunkStaysUntilItsLastMappingGoes) {
  auto driver = host();
  ChunkHandle handle = 0;
  ASSERT_EQ(driver->create(&handle, G), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, 2 * G, 0, &range), Status::Success);
  ASSERT_EQ(driver->map(range.base(), G, 0, handle), Status::Success);
  ASSERT_EQ(driver->map(range.base() + G, G, 0, handle), Status::Success);
  ASSERT_EQ(driver->release(handle), Status::Success);
  EXPECT_EQ(driver->map(range.base(), G, 0, handle), Status::InvalidHandle);
  EXPECT_EQ(driver->counters().live_chunks, 1u);
  ASSERT_EQ(driver->unmap(range.base(), G), Status::Success);
  EXPECT_EQ(driver->counters().chunk_bytes, G);
  ASSERT_EQ(driver->unmap(range.base() + G, G), Status::Success);
  EXPECT_EQ(driver->counters().live_chunks, 0u);
  EXPECT_EQ(driver->counters().chunk_bytes, 0u);
}

TEST(HostDriver, LargeReservationsCostNoMemory) {
  auto driver = host();
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, std::size_t{1} << 40, std::size_t{1} << 30, &range),
            Status::Success);
  EXPECT_EQ(range.base() % (std::size_t{1} << 30), 0u) << "alignment honoured";
  ChunkHandle handle = 0;
  ASSERT_EQ(driver->create(&handle, std::size_t{64} << 30), Status::Success) << "memfd is lazy";
  ASSERT_EQ(driver->map(range.base(), std::size_t{64} << 30, 0, handle), Status::Success);
  ASSERT_EQ(driver->set_access(range.base(), std::size_t{64} << 30, Access::ReadWrite),
            Status::Success);
  std::memset(reinterpret_cast<void*>(range.base() + (std::size_t{32} << 30)), 7, 4096);
  ASSERT_EQ(driver->unmap(range.base(), std::size_t{64} << 30), Status::Success);
  ASSERT_EQ(driver->release(handle), Status::Success);
}

TEST(HostDriver, CreatesMoreChunksThanTheOpenFileLimitAllowsWithoutTouchingMemory) {
  auto driver = host();
  const MemfdUsage before = host_driver_memfds();
  constexpr std::size_t kChunks = 25000;
  std::vector<ChunkHandle> handles(kChunks);
  {
    OpenFileLimit limit(1024);
    ASSERT_LT(OpenFileLimit::current(), kChunks) << "one memfd per chunk would not fit";
    for (auto& handle : handles) ASSERT_EQ(driver->create(&handle, G), Status::Success);
  }
  EXPECT_EQ(driver->counters().live_chunks, kChunks);
  EXPECT_EQ(driver->counters().chunk_bytes, kChunks * G);
  const MemfdUsage created = host_driver_memfds();
  EXPECT_EQ(created.files - before.files, 2u) << "25000 * 64 KiB fill two 1 GiB arenas";
  EXPECT_EQ(created.bytes, 0u) << "chunks take memory on first touch only";

  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, 2 * G, 0, &range), Status::Success);
  ASSERT_EQ(driver->map(range.base(), G, 0, handles.front()), Status::Success);
  ASSERT_EQ(driver->map(range.base() + G, G, 0, handles.back()), Status::Success);
  ASSERT_EQ(driver->set_access(range.base(), 2 * G, Access::ReadWrite), Status::Success);
  std::memset(reinterpret_cast<void*>(range.base()), 1, G);
  std::memset(reinterpret_cast<void*>(range.base() + G), 2, G);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(range.base())[G - 1], 1)
      << "the first and last chunk do not overlap";
  ASSERT_EQ(driver->unmap(range.base(), G), Status::Success);
  ASSERT_EQ(driver->unmap(range.base() + G, G), Status::Success);

  for (const auto handle : handles) ASSERT_EQ(driver->release(handle), Status::Success);
  EXPECT_EQ(driver->counters().live_chunks, 0u);
  EXPECT_EQ(host_driver_memfds().files, before.files) << "empty arenas are closed";
}

TEST(HostDriver, ARecreatedChunkReadsZerosAndItsMemoryWentBack) {
  auto driver = host();
  PhysicalChunk keeper;  // keeps the arena open, so the freed slice is reused, not closed
  ASSERT_EQ(PhysicalChunk::create(*driver, G, &keeper), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver, G, 0, &range), Status::Success);
  auto* bytes = reinterpret_cast<unsigned char*>(range.base());

  ChunkHandle first = 0;
  ASSERT_EQ(driver->create(&first, G), Status::Success);
  ASSERT_EQ(driver->map(range.base(), G, 0, first), Status::Success);
  ASSERT_EQ(driver->set_access(range.base(), G, Access::ReadWrite), Status::Success);
  std::memset(bytes, 0xab, G);
  const std::string slice = file_offset_of(range.base());
  ASSERT_FALSE(slice.empty());
  EXPECT_GE(host_driver_memfds().bytes, G);
  ASSERT_EQ(driver->release(first), Status::Success);
  EXPECT_GE(host_driver_memfds().bytes, G) << "still mapped: the memory stays";
  ASSERT_EQ(driver->unmap(range.base(), G), Status::Success);
  EXPECT_EQ(host_driver_memfds().bytes, 0u) << "the slice was hole-punched";

  ChunkHandle second = 0;
  ASSERT_EQ(driver->create(&second, G), Status::Success);
  ASSERT_EQ(driver->map(range.base(), G, 0, second), Status::Success);
  ASSERT_EQ(driver->set_access(range.base(), G, Access::Read), Status::Success);
  EXPECT_EQ(file_offset_of(range.base()), slice) << "the freed slice is reused";
  EXPECT_TRUE(std::all_of(bytes, bytes + G, [](unsigned char b) { return b == 0; }));
  ASSERT_EQ(driver->unmap(range.base(), G), Status::Success);
  ASSERT_EQ(driver->release(second), Status::Success);
}

TEST(HostDriver, BadOptionsAndAlignmentsAreRefused) {
  HostDriverOptions options;
  options.granularity = 3 * 4096;
  EXPECT_THROW(make_host_driver(options), DriverUnavailable);
  options.granularity = 512;
  EXPECT_THROW(make_host_driver(options), DriverUnavailable);
  auto driver = host();
  DevicePtr ptr = 0;
  EXPECT_EQ(driver->reserve(&ptr, G, 3 * G), Status::InvalidValue);
  EXPECT_EQ(driver->reserve(&ptr, 0), Status::InvalidValue);
  EXPECT_EQ(driver->create(nullptr, G), Status::InvalidValue);
}

TEST(HostDriver, DestructionCleansUpWhatWasLeaked) {
  auto driver = host();
  ChunkHandle handle = 0;
  DevicePtr ptr = 0;
  ASSERT_EQ(driver->create(&handle, G), Status::Success);
  ASSERT_EQ(driver->reserve(&ptr, 2 * G), Status::Success);
  ASSERT_EQ(driver->map(ptr, G, 0, handle), Status::Success);
  driver.reset();
  EXPECT_EQ(protection_of(ptr), "");
}

TEST(HostDriver, CapturesBeginAndEndOnStreamsOtherThanTheDefault) {
  HostDriverOptions options;
  options.granularity = testing::kHostTestGranularity;
  auto driver = make_host_driver(options);
  bool capturing = true;
  EXPECT_EQ(host_set_capturing(*driver, 0, true), Status::InvalidValue);
  ASSERT_EQ(host_set_capturing(*driver, 3, true), Status::Success);
  ASSERT_EQ(driver->stream_is_capturing(3, &capturing), Status::Success);
  EXPECT_TRUE(capturing);
  ASSERT_EQ(driver->stream_is_capturing(4, &capturing), Status::Success);
  EXPECT_FALSE(capturing);
  ASSERT_EQ(host_set_capturing(*driver, 3, false), Status::Success);
  ASSERT_EQ(driver->stream_is_capturing(3, &capturing), Status::Success);
  EXPECT_FALSE(capturing);
  EXPECT_EQ(driver->counters().capture_queries, 3u);
  EXPECT_EQ(driver->stream_is_capturing(3, nullptr), Status::InvalidValue);
}

// The emulated process sees `devices` devices, each able to reach every other's memory.
TEST(HostDriver, PeersAreTheOtherDevicesOfTheProcess) {
  HostDriverOptions options;
  options.granularity = testing::kHostTestGranularity;
  options.device = 1;
  options.devices = 4;
  auto driver = make_host_driver(options);
  std::vector<int> peers;
  ASSERT_EQ(driver->accessible_peers(&peers), Status::Success);
  EXPECT_EQ(peers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(driver->set_peers({0, 4}), Status::InvalidDevice);
  EXPECT_EQ(driver->set_peers({0, 3}), Status::Success);
  options.device = 2;
  options.devices = 1;
  auto alone = make_host_driver(options);
  ASSERT_EQ(alone->accessible_peers(&peers), Status::Success);
  EXPECT_EQ(peers, (std::vector<int>{0, 1}));  // devices is at least device + 1
}

TEST(DriverFactory, NamesBackends) {
  EXPECT_EQ(make_driver("host")->name(), "host");
  const auto automatic = make_driver("auto");
  EXPECT_TRUE(automatic->name() == "host" || automatic->name() == "cuda");
  EXPECT_THROW(make_driver("tpu"), UsageError);
  try {
    make_driver("cuda");
  } catch (const DriverUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("--backend host"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stalloc::vmm
