// The unbacked host driver (HostDriverOptions::backed = false): the books and refusals of the
// backed one, without its memory. A random sequence of calls, valid and not, run on both drivers
// answers the same codes and leaves the same counters; the unbacked one makes no kernel memory
// area and opens no memfd, hands out addresses in its fake range that are never reused, and has
// no mapping limit but the one asked for.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/vmm/vmm_test_support.h"
#include "vmm/host_driver.h"

namespace stalloc::vmm {
namespace {

constexpr std::size_t G = testing::kHostTestGranularity;

std::unique_ptr<Driver> unbacked(std::size_t max_mappings = 0, std::size_t max_bytes = 0) {
  HostDriverOptions options;
  options.granularity = G;
  options.backed = false;
  options.max_mappings = max_mappings;
  options.max_bytes = max_bytes;
  return make_host_driver(options);
}

void expect_same_counters(const DriverCounters& a, const DriverCounters& b, int step) {
  EXPECT_EQ(a.creates, b.creates) << "step " << step;
  EXPECT_EQ(a.releases, b.releases) << "step " << step;
  EXPECT_EQ(a.reserves, b.reserves) << "step " << step;
  EXPECT_EQ(a.frees, b.frees) << "step " << step;
  EXPECT_EQ(a.maps, b.maps) << "step " << step;
  EXPECT_EQ(a.unmaps, b.unmaps) << "step " << step;
  EXPECT_EQ(a.set_accesses, b.set_accesses) << "step " << step;
  EXPECT_EQ(a.set_access_bytes, b.set_access_bytes) << "step " << step;
  EXPECT_EQ(a.live_chunks, b.live_chunks) << "step " << step;
  EXPECT_EQ(a.live_reservations, b.live_reservations) << "step " << step;
  EXPECT_EQ(a.live_mappings, b.live_mappings) << "step " << step;
  EXPECT_EQ(a.peak_live_mappings, b.peak_live_mappings) << "step " << step;
  EXPECT_EQ(a.chunk_bytes, b.chunk_bytes) << "step " << step;
  EXPECT_EQ(a.peak_chunk_bytes, b.peak_chunk_bytes) << "step " << step;
}

// Both drivers get the same calls; pointers are named by (reservation, granule offset) and
// turned into each driver's own address, so only the addresses differ.
class Twins {
 public:
  Twins(std::size_t max_mappings, std::size_t max_bytes) {
    HostDriverOptions options;
    options.granularity = G;
    options.max_mappings = max_mappings;
    options.max_bytes = max_bytes;
    drivers_[0] = make_host_driver(options);
    drivers_[1] = unbacked(max_mappings, max_bytes);
  }

  // Runs the call on both drivers; expects the same status and returns it.
  template <typename Call>
  Status both(Call call, int step) {
    const Status backed = call(*drivers_[0], 0);
    const Status plain = call(*drivers_[1], 1);
    EXPECT_EQ(backed, plain) << "step " << step << ": " << status_name(backed) << " vs "
                             << status_name(plain);
    expect_same_counters(drivers_[0]->counters(), drivers_[1]->counters(), step);
    ++answers_[backed];
    return backed;
  }

  // How often each status was answered.
  int answers(Status s) const {
    auto it = answers_.find(s);
    return it == answers_.end() ? 0 : it->second;
  }

  Driver& operator[](int i) { return *drivers_[i]; }

 private:
  std::unique_ptr<Driver> drivers_[2];
  std::map<Status, int> answers_;
};

TEST(UnbackedHostDriver, AnswersEveryCallAsTheBackedOneDoes) {
  Twins twins(/*max_mappings=*/12, /*max_bytes=*/24 * G);
  struct Reservation {
    DevicePtr base[2];
    std::size_t granules;
  };
  std::vector<ChunkHandle> chunks;        // live
  std::vector<ChunkHandle> stale{999999};  // released, or never made
  // Live ones only: the backed driver may hand a freed range out again (mmap reuses addresses),
  // the unbacked one never does, so a stale pointer is the one call they may answer differently.
  std::vector<Reservation> reservations;
  std::mt19937 rng(20240531);
  auto pick = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
  };
  // A size in granules, sometimes not a multiple of the granularity.
  auto size_of = [&](std::size_t granules) { return granules * G + (pick(8) == 0 ? G / 2 : 0); };

  struct Mapped {
    DevicePtr ptr[2];
    std::size_t size;
    std::size_t room;  // bytes from ptr to the end of its reservation
  };
  std::vector<Mapped> mapped;  // live mappings

  std::size_t successes = 0;
  for (int step = 0; step < 6000; ++step) {
    const std::size_t op = pick(10);
    if (op == 0 || chunks.empty()) {
      const std::size_t size = size_of(1 + pick(3));
      ChunkHandle handle[2] = {0, 0};
      if (twins.both([&](Driver& d, int i) { return d.create(&handle[i], size); }, step) ==
          Status::Success) {
        EXPECT_EQ(handle[0], handle[1]);
        chunks.push_back(handle[0]);
        ++successes;
      }
    } else if (op == 1) {
      if (pick(2) != 0) continue;
      const bool live = pick(8) != 0;
      const std::size_t index = pick(live ? chunks.size() : stale.size());
      const ChunkHandle handle = live ? chunks[index] : stale[index];
      if (twins.both([&](Driver& d, int) { return d.release(handle); }, step) ==
          Status::Success) {
        chunks.erase(chunks.begin() + static_cast<std::ptrdiff_t>(index));
        stale.push_back(handle);
        ++successes;
      }
    } else if (op == 2 || reservations.empty()) {
      const std::size_t granules = 1 + pick(8);
      const std::size_t alignment = pick(4) == 0 ? 4 * G : (pick(8) == 0 ? 3 * G : 0);
      const std::size_t size = size_of(granules);
      Reservation r{{0, 0}, granules};
      if (twins.both([&](Driver& d, int i) { return d.reserve(&r.base[i], size, alignment); },
                     step) == Status::Success) {
        reservations.push_back(r);
        ++successes;
      }
    } else if (op == 3) {
      if (pick(3) != 0) continue;  // rarer than reserves, so that mappings pile up
      const std::size_t index = pick(reservations.size());
      const Reservation r = reservations[index];
      const std::size_t size = pick(4) == 0 ? size_of(pick(4)) : r.granules * G;
      if (twins.both([&](Driver& d, int i) { return d.free_reservation(r.base[i], size); },
                     step) == Status::Success) {
        reservations.erase(reservations.begin() + static_cast<std::ptrdiff_t>(index));
        std::erase_if(mapped, [&](const Mapped& m) {
          return m.ptr[1] >= r.base[1] && m.ptr[1] < r.base[1] + r.granules * G;
        });
        ++successes;
      }
    } else if (op <= 6) {
      const Reservation r = reservations[pick(reservations.size())];
      // Inside the reservation: the backed driver's reservations may lie back to back, the
      // unbacked one's never do, so one past the end may be another reservation's start.
      const std::size_t offset = pick(r.granules) * G;
      const std::size_t size = size_of(pick(3));
      const ChunkHandle handle =
          pick(8) != 0 ? chunks[pick(chunks.size())] : stale[pick(stale.size())];
      const std::size_t chunk_offset = pick(6) == 0 ? G : 0;
      if (twins.both([&](Driver& d, int i) {
            return d.map(r.base[i] + offset, size, chunk_offset, handle);
          }, step) == Status::Success) {
        mapped.push_back(
            Mapped{{r.base[0] + offset, r.base[1] + offset}, size, r.granules * G - offset});
        ++successes;
      }
    } else {
      // A live mapping, or part of one, or one and what follows it.
      if (mapped.empty()) continue;
      const std::size_t index = pick(mapped.size());
      Mapped m = mapped[index];
      if (pick(4) == 0) m.size = pick(2) == 0 || m.size + G > m.room ? G : m.size + G;
      const bool unmapping = op == 7;
      if (twins.both([&](Driver& d, int i) {
            return unmapping ? d.unmap(m.ptr[i], m.size)
                             : d.set_access(m.ptr[i], m.size, Access::ReadWrite);
          }, step) == Status::Success) {
        if (unmapping) mapped.erase(mapped.begin() + static_cast<std::ptrdiff_t>(index));
        ++successes;
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
  const DriverCounters c = twins[1].counters();
  EXPECT_GT(successes, 400u) << "the sequence should do more than fail";
  EXPECT_GT(c.maps, 50u);
  EXPECT_GT(c.unmaps, 20u);
  EXPECT_GT(c.set_accesses, 10u);
  EXPECT_GT(c.frees, 10u);
  EXPECT_EQ(c.peak_live_mappings, 12u) << "the mapping limit was reached";
  EXPECT_GT(twins.answers(Status::InvalidValue), 100);
  EXPECT_GT(twins.answers(Status::InvalidHandle), 10);
  EXPECT_GT(twins.answers(Status::OutOfMemory), 10) << "max_mappings and max_bytes";
}

TEST(UnbackedHostDriver, HoldsNoMemoryAndMakesNoKernelArea) {
  auto driver = unbacked();
  EXPECT_FALSE(driver->host_accessible());
  const std::size_t areas_before = testing::process_areas();
  const testing::MemfdUsage memfds_before = testing::host_driver_memfds();
  constexpr std::size_t kMappings = 2000;
  DevicePtr base = 0;
  ASSERT_EQ(driver->reserve(&base, 2 * kMappings * G), Status::Success);
  ChunkHandle chunk = 0;
  ASSERT_EQ(driver->create(&chunk, std::size_t{64} << 30), Status::Success) << "64 GiB: nothing";
  std::vector<ChunkHandle> chunks(kMappings);
  for (std::size_t i = 0; i < kMappings; ++i) {
    ASSERT_EQ(driver->create(&chunks[i], G), Status::Success);
    // Every other granule, so a backed driver would need two areas per mapping.
    ASSERT_EQ(driver->map(base + 2 * i * G, G, 0, chunks[i]), Status::Success);
    ASSERT_EQ(driver->set_access(base + 2 * i * G, G, Access::ReadWrite), Status::Success);
  }
  // A backed driver needs two areas per mapping here (4000); the allocator's own heap growth
  // (a few dozen under AddressSanitizer) is all that may appear.
  EXPECT_LT(testing::process_areas(), areas_before + kMappings / 20) << "no mmap per mapping";
  EXPECT_EQ(testing::host_driver_memfds().files, memfds_before.files) << "no memfd";

  std::uint8_t byte = 1;
  EXPECT_EQ(driver->write_bytes(base, &byte, 1), Status::NotSupported);
  EXPECT_EQ(driver->read_bytes(&byte, base, 1), Status::NotSupported);

  for (std::size_t i = 0; i < kMappings; ++i) {
    ASSERT_EQ(driver->unmap(base + 2 * i * G, G), Status::Success);
    ASSERT_EQ(driver->release(chunks[i]), Status::Success);
  }
  ASSERT_EQ(driver->release(chunk), Status::Success);
  ASSERT_EQ(driver->free_reservation(base, 2 * kMappings * G), Status::Success);
  const DriverCounters c = driver->counters();
  EXPECT_EQ(c.live_chunks, 0u);
  EXPECT_EQ(c.chunk_bytes, 0u);
  EXPECT_EQ(c.peak_chunk_bytes, (std::size_t{64} << 30) + kMappings * G);
  EXPECT_EQ(c.peak_live_mappings, kMappings);
  EXPECT_EQ(c.set_access_bytes, kMappings * G);
}

TEST(UnbackedHostDriver, AddressesComeFromTheFakeRangeAlignedAndNeverReused) {
  auto driver = unbacked();
  DevicePtr a = 0;
  ASSERT_EQ(driver->reserve(&a, 3 * G), Status::Success);
  EXPECT_EQ(a, HostDriverOptions::kUnbackedBase);
  DevicePtr b = 0;
  ASSERT_EQ(driver->reserve(&b, G), Status::Success);
  EXPECT_GT(b, a + 3 * G) << "one past the end of a reservation is in no reservation";
  ASSERT_EQ(driver->free_reservation(a, 3 * G), Status::Success);
  ASSERT_EQ(driver->free_reservation(b, G), Status::Success);
  DevicePtr c = 0;
  ASSERT_EQ(driver->reserve(&c, 3 * G), Status::Success);
  EXPECT_GT(c, b) << "freed addresses are never handed out again";
  DevicePtr d = 0;
  constexpr std::size_t kGiB = std::size_t{1} << 30;
  ASSERT_EQ(driver->reserve(&d, std::size_t{1} << 40, kGiB), Status::Success);
  EXPECT_EQ(d % kGiB, 0u) << "alignment honoured";
  EXPECT_GT(d, c);
  ChunkHandle chunk = 0;
  ASSERT_EQ(driver->create(&chunk, G), Status::Success);
  EXPECT_EQ(driver->map(a, G, 0, chunk), Status::InvalidValue) << "a stale pointer maps nothing";
  ASSERT_EQ(driver->map(d + (std::size_t{1} << 40) - G, G, 0, chunk), Status::Success);
  ASSERT_EQ(driver->unmap(d + (std::size_t{1} << 40) - G, G), Status::Success);
  ASSERT_EQ(driver->release(chunk), Status::Success);
  ASSERT_EQ(driver->free_reservation(c, 3 * G), Status::Success);
  ASSERT_EQ(driver->free_reservation(d, std::size_t{1} << 40), Status::Success);
}

TEST(UnbackedHostDriver, TotalMemoryIsMaxBytesOrOneTebibyte) {
  std::size_t total = 0;
  ASSERT_EQ(unbacked()->total_memory(&total), Status::Success);
  EXPECT_EQ(total, HostDriverOptions::kUnbackedTotalMemory);
  EXPECT_EQ(total, std::size_t{1} << 40);
  ASSERT_EQ(unbacked(0, 8 * G)->total_memory(&total), Status::Success);
  EXPECT_EQ(total, 8 * G);
  EXPECT_EQ(unbacked()->total_memory(nullptr), Status::InvalidValue);
}

// vm.max_map_count (65530 by default) bounds the backed driver; the unbacked one has no limit
// unless asked for one.
TEST(UnbackedHostDriver, MappingsAreUnlimitedUnlessMaxMappingsIsSet) {
  constexpr std::size_t kMappings = 100000;
  auto driver = unbacked();
  DevicePtr base = 0;
  ASSERT_EQ(driver->reserve(&base, kMappings * G), Status::Success);
  ChunkHandle chunk = 0;
  ASSERT_EQ(driver->create(&chunk, G), Status::Success);
  for (std::size_t i = 0; i < kMappings; ++i) {
    ASSERT_EQ(driver->map(base + i * G, G, 0, chunk), Status::Success) << i;
  }
  EXPECT_EQ(driver->counters().live_mappings, kMappings);
  for (std::size_t i = 0; i < kMappings; ++i) {
    ASSERT_EQ(driver->unmap(base + i * G, G), Status::Success);
  }

  auto limited = unbacked(3);
  ASSERT_EQ(limited->reserve(&base, 4 * G), Status::Success);
  ASSERT_EQ(limited->create(&chunk, G), Status::Success);
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(limited->map(base + i * G, G, 0, chunk), Status::Success);
  }
  EXPECT_EQ(limited->map(base + 3 * G, G, 0, chunk), Status::OutOfMemory);
}

}  // namespace
}  // namespace stalloc::vmm
