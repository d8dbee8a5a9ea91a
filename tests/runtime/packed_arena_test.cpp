#include "src/packed_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "tests/runtime/runtime_test_support.h"
#include "vmm/fault_injecting_driver.h"

namespace stalloc {
namespace {

using namespace testing_support;

constexpr std::uint64_t kReservation = 1024 * kG;

struct ArenaFixture {
  explicit ArenaFixture(std::uint64_t capacity = 0, std::uint64_t idle_pages = 0)
      : host(host_driver()),
        driver(*host),
        sync(driver),
        memory(driver, kG, capacity),
        arena(driver, memory, sync, kReservation, 0, idle_pages * kG) {}
  std::unique_ptr<vmm::Driver> host;
  vmm::FaultInjectingDriver driver;
  StreamSync sync;
  PhysicalMemory memory;
  PackedArena arena;
};

void fill(vmm::DevicePtr p, std::uint64_t size, unsigned char value) {
  std::memset(reinterpret_cast<void*>(p), value, size);
}

bool holds(vmm::DevicePtr p, std::uint64_t size, unsigned char value) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  return std::all_of(bytes, bytes + size, [&](unsigned char b) { return b == value; });
}

TEST(PackedArena, SmallTensorsShareOnePage) {
  ArenaFixture f;
  std::string why;
  std::vector<vmm::DevicePtr> ptrs;
  for (int i = 0; i < 10; ++i) {
    ptrs.push_back(f.arena.allocate(3000, 0, &why));
    ASSERT_NE(ptrs.back(), 0u) << why;
    fill(ptrs.back(), 3000, static_cast<unsigned char>(i + 1));
  }
  EXPECT_EQ(f.arena.mapped_pages(), 1u);
  EXPECT_EQ(f.memory.reserved_bytes(), kG);
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(holds(ptrs[i], 3000, static_cast<unsigned char>(i + 1))) << i;
    EXPECT_EQ(ptrs[i] % PackedArena::kAlignment, 0u);
  }
  EXPECT_EQ(f.arena.live_bytes(), 30000u);
}

// Persistent tensors of 1.5 chunks each sit back to back: 4 of them take 6 chunks, not 8.
TEST(PackedArena, TensorsAcrossPagesPackBackToBack) {
  ArenaFixture f;
  std::string why;
  const std::uint64_t size = kG + kG / 2;
  std::vector<vmm::DevicePtr> ptrs;
  for (int i = 0; i < 4; ++i) {
    ptrs.push_back(f.arena.allocate(size, 0, &why));
    ASSERT_NE(ptrs.back(), 0u) << why;
    fill(ptrs.back(), size, static_cast<unsigned char>(0x40 + i));
  }
  EXPECT_EQ(f.arena.mapped_pages(), 6u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(holds(ptrs[i], size, static_cast<unsigned char>(0x40 + i)));
  // Freeing the second and third empties the pages only they covered.
  EXPECT_TRUE(f.arena.free(ptrs[1], 1));
  EXPECT_TRUE(f.arena.free(ptrs[2], 1));
  EXPECT_EQ(f.arena.mapped_pages(), 4u);
  EXPECT_TRUE(holds(ptrs[0], size, 0x40));
  EXPECT_TRUE(holds(ptrs[3], size, 0x43));
  EXPECT_FALSE(f.arena.free(ptrs[1], 1));
}

TEST(PackedArena, EmptiedPagesGoBackToPhysicalMemory) {
  ArenaFixture f;
  std::string why;
  vmm::DevicePtr p = f.arena.allocate(3 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_EQ(f.arena.mapped_pages(), 3u);
  const auto mappings = f.driver.counters().live_mappings;
  EXPECT_TRUE(f.arena.free(p, 1));
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  EXPECT_EQ(f.driver.counters().live_mappings, mappings - 3);
  EXPECT_EQ(f.memory.cached_bytes(), 3 * kG);
  // The next allocation takes the cached chunks instead of creating new ones.
  const auto creates = f.driver.counters().creates;
  vmm::DevicePtr q = f.arena.allocate(2 * kG, 0, &why);
  ASSERT_NE(q, 0u) << why;
  EXPECT_EQ(f.driver.counters().creates, creates);
  EXPECT_TRUE(f.arena.free(q, 1));
}

// The most recently emptied pages stay mapped: freeing and making a tensor again costs no VMM
// call; a page emptied later pushes the oldest idle one out, and release_idle empties the rest.
TEST(PackedArena, RecentlyEmptiedPagesStayMappedForReuse) {
  ArenaFixture f(0, 2);
  std::string why;
  vmm::DevicePtr a = f.arena.allocate(2 * kG, 0, &why);
  ASSERT_NE(a, 0u) << why;
  EXPECT_TRUE(f.arena.free(a, 1));
  EXPECT_EQ(f.arena.mapped_pages(), 2u);
  const auto maps = f.driver.counters().maps;
  vmm::DevicePtr b = f.arena.allocate(2 * kG, 0, &why);
  EXPECT_EQ(b, a);
  EXPECT_EQ(f.driver.counters().maps, maps);
  vmm::DevicePtr c = f.arena.allocate(kG, 0, &why);
  ASSERT_NE(c, 0u) << why;
  EXPECT_TRUE(f.arena.free(b, 1));
  EXPECT_TRUE(f.arena.free(c, 1));  // three empty pages, two may stay
  EXPECT_EQ(f.arena.mapped_pages(), 2u);
  EXPECT_EQ(f.memory.cached_bytes(), kG);
  EXPECT_EQ(f.arena.release_idle(), 2u);
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  EXPECT_EQ(f.memory.cached_bytes(), 3 * kG);
}

// While the GPU may still use a freed page, the page keeps its chunk; taking it again calls the
// unmap off, and it goes only once its events complete.
TEST(PackedArena, PageInFlightIsKeptUntilItsEventsComplete) {
  ArenaFixture f;
  std::string why;
  f.driver.hold_events(true);
  vmm::DevicePtr p = f.arena.allocate(kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_TRUE(f.arena.free(p, 1));
  EXPECT_EQ(f.arena.mapped_pages(), 1u);
  EXPECT_EQ(f.memory.cached_bytes(), 0u);
  const auto maps = f.driver.counters().maps;
  vmm::DevicePtr q = f.arena.allocate(kG, 0, &why);
  EXPECT_EQ(q, p);
  EXPECT_EQ(f.driver.counters().maps, maps);
  EXPECT_TRUE(f.arena.free(q, 1));
  f.arena.poll();
  EXPECT_EQ(f.arena.mapped_pages(), 1u);
  f.driver.hold_events(false);
  f.arena.poll();
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  EXPECT_EQ(f.memory.cached_bytes(), kG);
}

// Bytes last used by another stream make the new user wait for it; the arena's own stream never
// waits for itself.
TEST(PackedArena, ReuseAfterAnotherStreamWaitsOnTheGpu) {
  ArenaFixture f;
  std::string why;
  ASSERT_EQ(f.sync.index_of(0x2000), 1u);
  f.driver.hold_events(true);
  vmm::DevicePtr p = f.arena.allocate(4096, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_TRUE(f.arena.free(p, StreamSync::bit(0) | StreamSync::bit(1)));
  EXPECT_EQ(f.sync.waits(), 0u);
  vmm::DevicePtr q = f.arena.allocate(4096, 0, &why);
  EXPECT_EQ(q, p);
  EXPECT_EQ(f.sync.waits(), 1u);
  EXPECT_TRUE(f.arena.free(q, StreamSync::bit(0)));
  vmm::DevicePtr r = f.arena.allocate(4096, 0, &why);
  EXPECT_EQ(f.sync.waits(), 1u);
  EXPECT_TRUE(f.arena.free(r, StreamSync::bit(0)));
}

TEST(PackedArena, CapacityRefusalLeavesNothingBehind) {
  ArenaFixture f(2 * kG);
  std::string why;
  vmm::DevicePtr p = f.arena.allocate(kG / 2, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_EQ(f.arena.allocate(2 * kG, 0, &why), 0u);
  EXPECT_NE(why.find("capacity"), std::string::npos) << why;
  EXPECT_EQ(f.arena.mapped_pages(), 1u);
  EXPECT_EQ(f.memory.reserved_bytes(), 2 * kG);  // the one page and one cached chunk
  vmm::DevicePtr q = f.arena.allocate(kG, 0, &why);
  ASSERT_NE(q, 0u) << why;
  EXPECT_TRUE(f.arena.free(p, 1));
  EXPECT_TRUE(f.arena.free(q, 1));
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
}

// Every map or set-access call of a three-page allocation failing in turn: nothing is mapped
// afterwards beyond what was, and the arena keeps serving.
TEST(PackedArena, EveryFailedDriverCallIsRolledBack) {
  for (vmm::CallMask kind : {vmm::CallMask::Map, vmm::CallMask::SetAccess, vmm::CallMask::Create}) {
    for (std::uint64_t k = 1; k <= 3; ++k) {
      ArenaFixture f;
      std::string why;
      vmm::DevicePtr keep = f.arena.allocate(100, 0, &why);
      ASSERT_NE(keep, 0u) << why;
      const auto mappings = f.driver.counters().live_mappings;
      f.driver.fail_nth(k, kind);
      EXPECT_EQ(f.arena.allocate(3 * kG, 0, &why), 0u) << k;
      EXPECT_EQ(f.driver.counters().live_mappings, mappings) << k;
      EXPECT_EQ(f.arena.mapped_pages(), 1u) << k;
      vmm::DevicePtr p = f.arena.allocate(3 * kG, 0, &why);
      ASSERT_NE(p, 0u) << why;
      fill(p, 3 * kG, 7);
      EXPECT_TRUE(holds(p, 3 * kG, 7));
      EXPECT_TRUE(f.arena.free(p, 1));
      EXPECT_TRUE(f.arena.free(keep, 1));
      EXPECT_EQ(f.driver.counters().live_mappings, mappings - 1) << k;
    }
  }
}

// Random sizes, random frees: live allocations never share a byte (an independent check on the
// addresses and on written patterns), and once all are gone no page stays mapped.
TEST(PackedArena, RandomWorkloadKeepsAllocationsApart) {
  ArenaFixture f;
  std::mt19937_64 rng(7);
  struct Live {
    vmm::DevicePtr p;
    std::uint64_t size;
    unsigned char tag;
  };
  std::vector<Live> live;
  std::string why;
  std::uint64_t peak_pages = 0;
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || rng() % 100 < 55) {
      const std::uint64_t size = 1 + rng() % (rng() % 4 == 0 ? 3 * kG : kG / 8);
      const auto tag = static_cast<unsigned char>(1 + step % 250);
      vmm::DevicePtr p = f.arena.allocate(size, 0, &why);
      ASSERT_NE(p, 0u) << why;
      fill(p, size, tag);
      live.push_back({p, size, tag});
    } else {
      const std::size_t i = rng() % live.size();
      ASSERT_TRUE(holds(live[i].p, live[i].size, live[i].tag)) << step;
      ASSERT_TRUE(f.arena.free(live[i].p, 1));
      live[i] = live.back();
      live.pop_back();
    }
    peak_pages = std::max(peak_pages, f.arena.mapped_pages());
  }
  std::vector<Live> sorted = live;
  std::sort(sorted.begin(), sorted.end(), [](const Live& a, const Live& b) { return a.p < b.p; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_LE(sorted[i - 1].p + sorted[i - 1].size, sorted[i].p);
  }
  std::uint64_t live_bytes = 0;
  for (const Live& l : live) {
    EXPECT_TRUE(holds(l.p, l.size, l.tag));
    live_bytes += l.size;
  }
  EXPECT_EQ(f.arena.live_bytes(), live_bytes);
  EXPECT_GT(peak_pages, 0u);
  for (const Live& l : live) ASSERT_TRUE(f.arena.free(l.p, 1));
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  EXPECT_EQ(f.arena.live_bytes(), 0u);
}

// An arena beside a plan pool of `pool_chunks` chunks it may borrow from.
struct LendingFixture {
  explicit LendingFixture(std::size_t pool_chunks)
      : host(host_driver()),
        driver(*host),
        sync(driver),
        memory(driver, kG, 0),
        pool(memory),
        lender(pool),
        arena(driver, memory, sync, kReservation, 0, 4 * kG, &lender) {
    EXPECT_TRUE(pool.grow_to(pool_chunks));
  }
  std::unique_ptr<vmm::Driver> host;
  vmm::FaultInjectingDriver driver;
  StreamSync sync;
  PhysicalMemory memory;
  PlanPool pool;
  IdleChunkLender lender;
  PackedArena arena;
};

// Pages are backed by idle pool chunks before any chunk is created, and an emptied lent page
// goes back to the pool at once instead of staying idle in the arena.
TEST(PackedArena, PagesBorrowIdlePoolChunksAndGiveThemBack) {
  LendingFixture f(4);
  f.lender.lend_any();
  std::string why;
  const auto creates = f.driver.counters().creates;
  const std::uint64_t p_size = 3 * kG - 1000;  // ends inside page 2, where q starts
  vmm::DevicePtr p = f.arena.allocate(p_size, 0, &why);
  ASSERT_NE(p, 0u) << why;
  fill(p, p_size, 0x5a);
  EXPECT_EQ(f.driver.counters().creates, creates);
  EXPECT_EQ(f.arena.lent_pages(), 3u);
  EXPECT_EQ(f.pool.idle_count(), 1u);
  EXPECT_EQ(f.memory.reserved_bytes(), 4 * kG);
  // Past the idle pool chunks, a chunk is created.
  vmm::DevicePtr q = f.arena.allocate(2 * kG, 0, &why);
  ASSERT_NE(q, 0u) << why;
  fill(q, 2 * kG, 0x6b);
  EXPECT_EQ(f.driver.counters().creates, creates + 1);
  EXPECT_EQ(f.pool.idle_count(), 0u);
  EXPECT_TRUE(holds(p, p_size, 0x5a));
  EXPECT_TRUE(f.arena.free(p, 1));
  EXPECT_EQ(f.arena.lent_pages(), 2u);  // the page q shares with p stays, and q's other one
  EXPECT_EQ(f.pool.idle_count(), 2u);
  EXPECT_EQ(f.lender.lent(), 2u);
  EXPECT_TRUE(holds(q, 2 * kG, 0x6b));
  EXPECT_TRUE(f.arena.free(q, 1));
  EXPECT_EQ(f.arena.lent_pages(), 0u);
  EXPECT_EQ(f.pool.idle_count(), 4u);
  EXPECT_EQ(f.lender.lent(), 0u);
}

// A chunk the arena already holds (the physical-memory cache) comes before a pool chunk.
TEST(PackedArena, CachedChunksComeBeforeLentOnes) {
  LendingFixture f(2);
  std::string why;
  vmm::DevicePtr p = f.arena.allocate(kG, 0, &why);  // lending not allowed: a new chunk
  ASSERT_NE(p, 0u) << why;
  EXPECT_EQ(f.arena.lent_pages(), 0u);
  EXPECT_EQ(f.arena.release_idle(), 0u);
  EXPECT_TRUE(f.arena.free(p, 1));
  EXPECT_EQ(f.arena.release_idle(), 1u);
  EXPECT_EQ(f.memory.cached_bytes(), kG);
  f.lender.lend_any();
  vmm::DevicePtr q = f.arena.allocate(2 * kG, 0, &why);
  ASSERT_NE(q, 0u) << why;
  EXPECT_EQ(f.memory.cached_bytes(), 0u);
  EXPECT_EQ(f.arena.lent_pages(), 1u);
  EXPECT_TRUE(f.arena.free(q, 1));
}

// While the GPU may still use an emptied lent page, the pool chunk stays occupied: a planned
// slot on it conflicts rather than sharing bytes with work in flight.
TEST(PackedArena, LentPageInFlightKeepsItsPoolChunk) {
  LendingFixture f(1);
  f.lender.lend_any();
  std::string why;
  f.driver.hold_events(true);
  vmm::DevicePtr p = f.arena.allocate(1000, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_TRUE(f.arena.free(p, 1));
  f.arena.poll();
  EXPECT_EQ(f.pool.idle_count(), 0u);
  f.driver.hold_events(false);
  f.arena.poll();
  EXPECT_EQ(f.pool.idle_count(), 1u);
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
}

}  // namespace
}  // namespace stalloc
