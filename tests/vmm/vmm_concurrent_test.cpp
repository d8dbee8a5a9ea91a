// Many threads using one driver and one chunk pool at once, as PyTorch's forward and backward
// threads do. Run under TSan in CI: the assertions check the data, TSan checks the locking.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "tests/vmm/vmm_test_support.h"
#include "vmm/chunk_pool.h"
#include "vmm/chunk_source.h"
#include "vmm/expandable_range.h"
#include "vmm/host_driver.h"
#include "vmm/mapping.h"
#include "vmm/physical_chunk.h"
#include "vmm/va_reservation.h"

namespace stalloc::vmm {
namespace {

constexpr std::size_t G = testing::kHostTestGranularity;
constexpr int kThreads = 8;
constexpr int kRounds = 150;

TEST(VmmConcurrent, ThreadsAcquireMapWriteUnmapAndRelease) {
  HostDriverOptions options;
  options.granularity = G;
  auto driver = make_host_driver(options);
  ChunkPool pool(*driver, kThreads / 2);  // fewer chunks than threads: acquire sometimes fails
  std::atomic<int> corrupted{0};
  std::atomic<int> served{0};

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      VaReservation range;
      if (VaReservation::reserve(*driver, 2 * G, 0, &range) != Status::Success) {
        ++corrupted;
        return;
      }
      for (int round = 0; round < kRounds; ++round) {
        const auto index = pool.acquire();
        if (!index) continue;
        {
          // Each held chunk is mapped twice: through the pool's chunk and an alias.
          Mapping mapping;
          Mapping alias;
          const ChunkHandle handle = pool.handle(*index);
          if (Mapping::map(*driver, range.base(), G, 0, handle, &mapping) != Status::Success ||
              Mapping::map(*driver, range.base() + G, G, 0, handle, &alias) != Status::Success ||
              driver->set_access(range.base(), 2 * G, Access::ReadWrite) != Status::Success) {
            ++corrupted;
          } else {
            const auto seed = static_cast<std::uint32_t>(t * kRounds + round);
            const auto bytes = testing::pattern(4096, seed);
            driver->write_bytes(mapping.ptr(), bytes.data(), bytes.size());
            std::vector<std::uint8_t> back(bytes.size());
            driver->read_bytes(back.data(), alias.ptr(), back.size());
            if (back != bytes) ++corrupted;
            ++served;
          }
        }
        pool.release(*index);
        PhysicalChunk own;
        if (PhysicalChunk::create(*driver, G, &own) != Status::Success) ++corrupted;
      }
    });
  }
  for (auto& thread : threads) thread.join();

  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_GT(served.load(), 0);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_LE(pool.peak_in_use(), pool.created());
  const DriverCounters c = driver->counters();
  EXPECT_EQ(c.live_mappings, 0u);
  EXPECT_EQ(c.live_reservations, 0u);
  EXPECT_EQ(c.live_chunks, pool.created());
  EXPECT_EQ(c.maps, c.unmaps);
  EXPECT_EQ(c.maps, 2 * static_cast<std::uint64_t>(served.load()));
}

TEST(VmmConcurrent, ExpandableRangesShareOnePool) {
  HostDriverOptions options;
  options.granularity = G;
  auto driver = make_host_driver(options);
  ChunkPool pool(*driver, 16);
  PoolChunkSource source(pool);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      ExpandableRange range(*driver, 8 * G);
      for (int round = 0; round < kRounds; ++round) {
        const Status s = range.grow(2 * G, source);
        if (s == Status::OutOfMemory) continue;  // others hold the pool's chunks
        if (s != Status::Success || range.shrink(2 * G) != Status::Success) ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(driver->counters().live_mappings, 0u);
}

// A lagging, unbacked driver shared by threads that each record on their own stream and query
// their own event; the even ones also make their stream wait for the next thread's event. With
// seed 0 a record answers NotReady exactly N times when only its own queries count it (the even
// threads' events, which nobody waits for), and at most N times when the queries of records
// ordered after it count it too (the odd threads' events).
TEST(VmmConcurrent, LaggingEventsAnswerNotReadyAtMostNTimes) {
  constexpr std::uint32_t kN = 3;
  HostDriverOptions options;
  options.granularity = G;
  options.backed = false;
  options.lag.queries = kN;
  auto driver = make_host_driver(options);
  std::vector<EventHandle> events(kThreads);
  for (auto& e : events) ASSERT_EQ(driver->event_create(&e), Status::Success);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto stream = static_cast<StreamHandle>(t + 1);
      const bool waits = t % 2 == 0;
      for (int round = 0; round < kRounds; ++round) {
        if (driver->event_record(events[t], stream) != Status::Success) ++wrong;
        if (waits && driver->stream_wait_event(stream, events[(t + 1) % kThreads]) !=
                         Status::Success) {
          ++wrong;
        }
        std::uint32_t not_ready = 0;
        Status s = Status::NotReady;
        while ((s = driver->event_query(events[t])) == Status::NotReady) ++not_ready;
        if (s != Status::Success || not_ready > kN || (waits && not_ready != kN)) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(driver->counters().event_records, static_cast<std::uint64_t>(kThreads) * kRounds);
}

}  // namespace
}  // namespace stalloc::vmm
