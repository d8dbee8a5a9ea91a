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
  explicit ArenaFixture(std::uint64_t capacity = 0, std::uint64_t idle_pages = 0,
                        std::uint64_t page_granules = 1, ArenaExtents extents = {})
      : host(host_driver()),
        driver(*host),
        sync(driver),
        memory(driver, kG, capacity),
        arena(driver, memory, sync, kReservation, 0, idle_pages * kG, nullptr, no_reclaimer(),
              page_granules, extents) {}
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

// A request goes where pages are mapped already rather than into the best-fitting span when
// that one would need a page mapped: [0, G) is an exact fit but unmapped; the end of the span
// [1.5G, 4G) lies on a mapped idle page. Best fit alone mapped a page per such request (MoE
// buffers that outgrow their views, every iteration).
TEST(PackedArena, RequestGoesWherePagesAreMapped) {
  ArenaFixture f(0, 1);
  std::string why;
  auto make = [&](std::uint64_t size, unsigned char value) {
    const vmm::DevicePtr p = f.arena.allocate(size, 0, &why);
    EXPECT_NE(p, 0u) << why;
    if (p != 0) fill(p, size, value);
    return p;
  };
  const vmm::DevicePtr a = make(kG, 0x11);
  const vmm::DevicePtr base = a;
  const vmm::DevicePtr s1 = make(kG / 2, 0x22);
  const vmm::DevicePtr b = make(kG, 0x33);
  const vmm::DevicePtr c = make(kG + kG / 2, 0x44);
  const vmm::DevicePtr s2 = make(kG / 2, 0x55);
  ASSERT_EQ(c, base + 2 * kG + kG / 2);
  EXPECT_TRUE(f.arena.free(a, 1));
  EXPECT_TRUE(f.arena.free(b, 1));
  EXPECT_TRUE(f.arena.free(c, 1));  // pages 0 and 2 retired, page 3 kept idle
  f.arena.poll();
  const std::uint64_t pages = f.arena.mapped_pages();
  const auto maps = f.driver.counters().maps;
  const vmm::DevicePtr d = make(kG, 0x66);
  EXPECT_EQ(d, base + 3 * kG);
  EXPECT_EQ(f.driver.counters().maps, maps);
  EXPECT_EQ(f.arena.mapped_pages(), pages);
  EXPECT_TRUE(holds(s1, kG / 2, 0x22));
  EXPECT_TRUE(holds(s2, kG / 2, 0x55));
  EXPECT_TRUE(holds(d, kG, 0x66));
  // With no mapped place left, best fit again: the exact span at the start.
  const vmm::DevicePtr e = make(kG, 0x77);
  EXPECT_EQ(e, base);
  EXPECT_EQ(f.driver.counters().maps, maps + 1);
  EXPECT_TRUE(holds(d, kG, 0x66));
}

// An arena short of a chunk takes one of its own idle pages before it creates one: here the
// capacity (three chunks) leaves no other way to map a two-page tensor beside a live one.
TEST(PackedArena, IdlePageGivesItsChunkBeforeOneIsCreated) {
  ArenaFixture f(3 * kG, 16);
  std::string why;
  const vmm::DevicePtr a = f.arena.allocate(kG, 0, &why);
  ASSERT_NE(a, 0u) << why;
  const vmm::DevicePtr s = f.arena.allocate(512, 0, &why);
  ASSERT_NE(s, 0u) << why;
  fill(s, 512, 0x5a);
  EXPECT_TRUE(f.arena.free(a, 1));
  EXPECT_EQ(f.arena.mapped_pages(), 2u);  // a's page stays mapped, idle
  const vmm::DevicePtr b = f.arena.allocate(2 * kG, 0, &why);
  ASSERT_NE(b, 0u) << why;
  fill(b, 2 * kG, 0x6b);
  EXPECT_EQ(f.memory.reserved_bytes(), 3 * kG);
  EXPECT_EQ(f.arena.mapped_pages(), 3u);
  EXPECT_TRUE(holds(s, 512, 0x5a));
  EXPECT_TRUE(holds(b, 2 * kG, 0x6b));
}

// A page emptied and taken again a thousand times leaves no trail: an arena keeping every idle
// page never pops the list of emptied pages from its front, so stale entries must go otherwise.
TEST(PackedArena, EmptiedPagesTakenAgainLeaveBoundedBookkeeping) {
  ArenaFixture f(0, 1u << 20);
  std::string why;
  for (int i = 0; i < 1000; ++i) {
    const vmm::DevicePtr p = f.arena.allocate(kG, 0, &why);
    ASSERT_NE(p, 0u) << why;
    EXPECT_TRUE(f.arena.free(p, 1));
  }
  EXPECT_EQ(f.arena.mapped_pages(), 1u);
  EXPECT_LE(f.arena.idle_entries(), 2u + 64u + 1u);
}

// While the GPU is behind, each page mapped asks about the oldest idle page only: pages
// emptied later were marked later. Six idle pages, eight pages to map: at most eight queries,
// not one per idle page per page mapped.
TEST(PackedArena, InFlightIdlePagesCostOneQueryPerPageMapped) {
  ArenaFixture f(0, 16);
  std::string why;
  f.driver.hold_events(true);
  std::vector<vmm::DevicePtr> xs;
  for (int i = 0; i < 6; ++i) {
    xs.push_back(f.arena.allocate(kG, 0, &why));
    ASSERT_NE(xs.back(), 0u) << why;
  }
  ASSERT_NE(f.arena.allocate(512, 0, &why), 0u) << why;
  for (vmm::DevicePtr x : xs) EXPECT_TRUE(f.arena.free(x, 1));
  const auto queries = f.driver.held_queries();
  const auto reserved = f.memory.reserved_bytes();
  ASSERT_NE(f.arena.allocate(8 * kG, 0, &why), 0u) << why;
  EXPECT_EQ(f.memory.reserved_bytes(), reserved + 8 * kG);  // none of them was done
  EXPECT_GT(f.driver.held_queries(), queries);
  EXPECT_LE(f.driver.held_queries(), queries + 8);
  f.driver.hold_events(false);
}

// The pages one free empties share one marker: one event per stream that used them, not one
// per page (llama7b-varlen-16 at G = 2 MiB: 6.7k-20k event calls per iteration -> 1.5k-4.8k).
TEST(PackedArena, PagesEmptiedByOneFreeShareTheirEvents) {
  ArenaFixture f(0, 16);
  std::string why;
  const vmm::DevicePtr p = f.arena.allocate(4 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  const auto records = f.driver.counters().event_records;
  EXPECT_TRUE(f.arena.free(p, 1));
  EXPECT_EQ(f.arena.mapped_pages(), 4u);
  // Recorded when a page is first wanted, not at the free; once for the four pages.
  EXPECT_EQ(f.driver.counters().event_records, records);
  f.arena.release_idle();
  EXPECT_EQ(f.driver.counters().event_records, records + 1);
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
}

// The pages emptied by up to kFreesPerMarker frees share one marker, recorded at the last of
// them: one event record per that many frees, not one per free.
TEST(PackedArena, FreesShareOneMarkerRecordedAfterTheLast) {
  ArenaFixture f(0, 64);
  std::string why;
  std::vector<vmm::DevicePtr> ptrs;
  for (std::uint32_t i = 0; i < FreeMarkers::kFreesPerMarker + 1; ++i) {
    ptrs.push_back(f.arena.allocate(kG, 0, &why));  // a page each
    ASSERT_NE(ptrs.back(), 0u) << why;
  }
  const auto records = f.driver.counters().event_records;
  for (std::uint32_t i = 0; i < FreeMarkers::kFreesPerMarker; ++i) {
    EXPECT_EQ(f.driver.counters().event_records, records) << i;
    EXPECT_TRUE(f.arena.free(ptrs[i], 1));
  }
  EXPECT_EQ(f.driver.counters().event_records, records + 1);
  EXPECT_TRUE(f.arena.free(ptrs.back(), 1));  // opens the next marker
  EXPECT_EQ(f.driver.counters().event_records, records + 1);
  EXPECT_EQ(f.arena.mapped_pages(), FreeMarkers::kFreesPerMarker + 1);
}

// An idle page the GPU may still be using keeps its chunk: the arena creates one instead.
TEST(PackedArena, IdlePageInFlightKeepsItsChunk) {
  ArenaFixture f(0, 16);
  std::string why;
  f.driver.hold_events(true);
  const vmm::DevicePtr a = f.arena.allocate(kG, 0, &why);
  ASSERT_NE(a, 0u) << why;
  const vmm::DevicePtr s = f.arena.allocate(512, 0, &why);
  ASSERT_NE(s, 0u) << why;
  EXPECT_TRUE(f.arena.free(a, 1));
  const auto unmaps = f.driver.counters().unmaps;
  const vmm::DevicePtr b = f.arena.allocate(2 * kG, 0, &why);
  ASSERT_NE(b, 0u) << why;
  EXPECT_EQ(f.driver.counters().unmaps, unmaps);
  EXPECT_EQ(f.memory.reserved_bytes(), 4 * kG);
  f.driver.hold_events(false);
  EXPECT_TRUE(f.arena.free(b, 1));
  // From s on: pages 1-5, two of them to map; a's old page, done now, gives one.
  const vmm::DevicePtr c = f.arena.allocate(4 * kG, 0, &why);
  ASSERT_NE(c, 0u) << why;
  EXPECT_EQ(f.memory.reserved_bytes(), 5 * kG);
}

// The number of emptied pages kept can change: raised, more stay mapped; lowered, the oldest
// beyond it are retired at once and unmapped once their events complete.
TEST(PackedArena, IdleLimitCanBeRaisedAndLowered) {
  ArenaFixture f(0, 1);
  std::string why;
  f.arena.set_idle_bytes(3 * kG);
  vmm::DevicePtr a = f.arena.allocate(3 * kG, 0, &why);
  ASSERT_NE(a, 0u) << why;
  EXPECT_TRUE(f.arena.free(a, 1));
  EXPECT_EQ(f.arena.mapped_pages(), 3u);
  const auto unmaps = f.driver.counters().unmaps;
  f.arena.set_idle_bytes(kG);
  f.arena.poll();
  EXPECT_EQ(f.arena.mapped_pages(), 1u);
  EXPECT_EQ(f.driver.counters().unmaps, unmaps + 2);
  EXPECT_EQ(f.memory.cached_bytes(), 2 * kG);
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
  // Three fresh pages: three creates and three maps, one set-access over the whole allocation.
  const std::pair<vmm::CallMask, std::uint64_t> calls[] = {
      {vmm::CallMask::Map, 3}, {vmm::CallMask::SetAccess, 1}, {vmm::CallMask::Create, 3}};
  for (const auto& [kind, count] : calls) {
    for (std::uint64_t k = 1; k <= count; ++k) {
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

// Access is set once per allocation, over all its pages, however many were mapped for it.
TEST(PackedArena, OneSetAccessPerAllocation) {
  ArenaFixture f(0, 1024);
  std::string why;
  const auto before = f.driver.counters();
  vmm::DevicePtr p = f.arena.allocate(5 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  auto now = f.driver.counters();
  EXPECT_EQ(now.maps - before.maps, 5u);
  EXPECT_EQ(now.set_accesses - before.set_accesses, 1u);
  EXPECT_EQ(now.set_access_bytes - before.set_access_bytes, 5 * kG);
  fill(p, 5 * kG, 9);
  EXPECT_TRUE(holds(p, 5 * kG, 9));
  // Freed and made again, the kept pages serve it: no call at all.
  EXPECT_TRUE(f.arena.free(p, 1));
  const auto kept = f.driver.counters();
  vmm::DevicePtr q = f.arena.allocate(5 * kG, 0, &why);
  ASSERT_NE(q, 0u) << why;
  now = f.driver.counters();
  EXPECT_EQ(now.maps + now.set_accesses + now.creates, kept.maps + kept.set_accesses + kept.creates);
}

// Two arenas on one PhysicalMemory: `second` (pages of `page_granules` granules, serving
// `stream`) reclaims the idle pages of `first` through its hook.
struct TwoArenas {
  explicit TwoArenas(std::uint32_t stream, std::uint64_t page_granules = 1)
      : host(host_driver()),
        sync(*host),
        memory(*host, kG, 0),
        first(*host, memory, sync, kReservation, 0, 1024 * kG),
        second(*host, memory, sync, kReservation, stream, 1024 * kG, nullptr, from_first,
               page_granules) {
    from_first.chunk = [this](const PackedArena*) { return first.give_idle_chunk() > 0; };
  }
  // `pages` pages of `first` made and emptied: kept mapped, idle.
  void idle_pages_in_first(std::uint64_t pages) {
    std::string why;
    const vmm::DevicePtr p = first.allocate(pages * kG, 0, &why);
    ASSERT_NE(p, 0u) << why;
    ASSERT_TRUE(first.free(p, StreamSync::bit(0)));
    ASSERT_EQ(first.mapped_pages(), pages);
  }
  std::unique_ptr<vmm::Driver> host;
  StreamSync sync;
  PhysicalMemory memory;
  TestReclaimer from_first;  // second's: takes first's idle pages
  PackedArena first;
  PackedArena second;
};

// An arena short of a chunk takes another arena's idle page (through its reclaim hook) before it
// creates one.
TEST(PackedArena, ReclaimTakesAnotherArenasIdlePageBeforeCreating) {
  TwoArenas t(1);
  t.idle_pages_in_first(3);
  const auto creates = t.host->counters().creates;
  std::string why;
  vmm::DevicePtr b = t.second.allocate(2 * kG, 1, &why);
  ASSERT_NE(b, 0u) << why;
  EXPECT_EQ(t.host->counters().creates, creates);  // two of the idle pages' chunks, none created
  EXPECT_EQ(t.first.mapped_pages(), 1u);
  EXPECT_EQ(t.memory.reserved_bytes(), 3 * kG);
  std::memset(reinterpret_cast<void*>(b), 5, 2 * kG);
  EXPECT_TRUE(holds(b, 2 * kG, 5));
  // One idle page is left to take; the second page is created.
  vmm::DevicePtr c = t.second.allocate(2 * kG, 1, &why);
  ASSERT_NE(c, 0u) << why;
  EXPECT_EQ(t.host->counters().creates, creates + 1);
  EXPECT_TRUE(t.second.free(b, StreamSync::bit(1)));
  EXPECT_TRUE(t.second.free(c, StreamSync::bit(1)));
}

// An arena of large pages at the most memory ever held: another arena's idle pages whose GPU
// work is done go before its page is made, so that the memory held does not grow beside them.
TEST(PackedArena, LargePagesReclaimOtherArenasIdlePagesBeforeGrowing) {
  TwoArenas t(0, 4);
  t.idle_pages_in_first(6);
  ASSERT_EQ(t.memory.high_water_bytes(), 6 * kG);
  std::string why;
  vmm::DevicePtr b = t.second.allocate(3 * kG, 0, &why);
  ASSERT_NE(b, 0u) << why;
  EXPECT_EQ(t.first.mapped_pages(), 2u);  // four idle pages gave their chunks back
  EXPECT_EQ(t.memory.reserved_bytes(), 6 * kG);
  EXPECT_EQ(t.memory.high_water_bytes(), 6 * kG);
  std::memset(reinterpret_cast<void*>(b), 6, 3 * kG);
  EXPECT_TRUE(holds(b, 3 * kG, 6));
  EXPECT_TRUE(t.second.free(b, 1));
}

// Random sizes, random frees: live allocations never share a byte (an independent check on the
// addresses and on written patterns), and once all are gone no page stays mapped.
// Random sizes, random frees, every byte checked. `hold_events` flips now and then whether the
// GPU is done with freed memory, so that idle pages are sometimes taken back and sometimes must
// keep their chunks.
// scale: sizes in pages of the arena (an arena of larger pages gets larger tensors).
void run_random_workload(ArenaFixture& f, bool flip_events, std::uint64_t scale = 1) {
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
    if (flip_events && rng() % 50 == 0) f.driver.hold_events(rng() % 2 == 0);
    if (live.empty() || rng() % 100 < 55) {
      const std::uint64_t size = 1 + rng() % (rng() % 4 == 0 ? 3 * kG * scale : kG * scale / 8);
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
  f.driver.hold_events(false);
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
  // Kept idle pages leave only by giving their chunks to other pages.
  if (flip_events) {
    EXPECT_GT(f.driver.counters().unmaps, 0u);
  }
  for (const Live& l : live) ASSERT_TRUE(f.arena.free(l.p, 1));
  f.arena.release_idle();
  f.arena.poll();
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  EXPECT_EQ(f.arena.live_bytes(), 0u);
  EXPECT_EQ(f.memory.cached_bytes(), f.memory.reserved_bytes());
}

TEST(PackedArena, RandomWorkloadKeepsAllocationsApart) {
  ArenaFixture f;
  run_random_workload(f, false);
}

// Every emptied page kept (as while a plan with Dynamic slots is followed): idle pages give
// their chunks to other pages when the GPU is done with them, never before.
TEST(PackedArena, RandomWorkloadKeepingIdlePagesKeepsAllocationsApart) {
  ArenaFixture f(0, 1u << 20);
  run_random_workload(f, true);
}

// Pages of four granules (the online path's online_page): one chunk made and one mapping per
// page, whatever the tensors on it; idle pages give their chunks to new pages of the arena,
// and released, the chunks go back to the driver (they fit no other page size).
TEST(PackedArena, LargePagesMakeOneChunkAndOneMappingPerPage) {
  ArenaFixture f(0, 1u << 20, 4);
  EXPECT_EQ(f.arena.page_bytes(), 4 * kG);
  std::string why;
  const vmm::DevicePtr a = f.arena.allocate(10 * kG, 0, &why);
  ASSERT_NE(a, 0u) << why;
  const vmm::DevicePtr b = f.arena.allocate(kG / 2, 0, &why);
  ASSERT_NE(b, 0u) << why;
  fill(a, 10 * kG, 1);
  fill(b, kG / 2, 2);
  EXPECT_EQ(f.driver.counters().creates, 3u);
  EXPECT_EQ(f.driver.counters().maps, 3u);
  EXPECT_EQ(f.arena.mapped_pages(), 3u);
  EXPECT_EQ(f.memory.reserved_bytes(), 12 * kG);
  EXPECT_TRUE(holds(a, 10 * kG, 1));
  EXPECT_TRUE(f.arena.free(a, 1));
  // The idle pages' chunks serve the next tensor: no chunk made.
  const vmm::DevicePtr c = f.arena.allocate(9 * kG, 0, &why);
  ASSERT_NE(c, 0u) << why;
  fill(c, 9 * kG, 3);
  EXPECT_EQ(f.driver.counters().creates, 3u);
  EXPECT_TRUE(holds(b, kG / 2, 2));
  EXPECT_TRUE(f.arena.free(b, 1));
  EXPECT_TRUE(f.arena.free(c, 1));
  f.arena.release_idle();
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  EXPECT_EQ(f.memory.reserved_bytes(), 0u);
  EXPECT_EQ(f.driver.counters().live_chunks, 0u);
}

TEST(PackedArena, LargePagesFailedCallsAreRolledBack) {
  for (const vmm::CallMask kind : {vmm::CallMask::Create, vmm::CallMask::Map, vmm::CallMask::SetAccess}) {
    ArenaFixture f(0, 0, 4);
    std::string why;
    f.driver.fail_nth(1, kind);
    EXPECT_EQ(f.arena.allocate(6 * kG, 0, &why), 0u);
    EXPECT_EQ(f.driver.counters().live_mappings, 0u);
    EXPECT_EQ(f.memory.reserved_bytes(), 0u);
    const vmm::DevicePtr p = f.arena.allocate(6 * kG, 0, &why);
    ASSERT_NE(p, 0u) << why;
    fill(p, 6 * kG, 9);
    EXPECT_TRUE(holds(p, 6 * kG, 9));
    EXPECT_TRUE(f.arena.free(p, 1));
  }
}

TEST(PackedArena, LargePagesRandomWorkloadKeepsAllocationsApart) {
  ArenaFixture f(0, 0, 4);
  run_random_workload(f, false, 4);
}

TEST(PackedArena, LargePagesKeepingIdlePagesKeepsAllocationsApart) {
  ArenaFixture f(0, 1u << 20, 4);
  run_random_workload(f, true, 4);
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

// Pages are backed by idle pool chunks before any chunk is created; an emptied lent page stays
// mapped (parked) for the arena's next tensor, and release_idle gives it back to the pool.
TEST(PackedArena, PagesBorrowIdlePoolChunksAndParkThem) {
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
  EXPECT_EQ(f.lender.parked(), 2u);  // pages 0 and 1; page 2 still holds q
  EXPECT_EQ(f.arena.lent_pages(), 4u);
  EXPECT_EQ(f.pool.idle_count(), 0u);
  // The next tensor reuses the parked pages without a VMM call.
  const auto maps = f.driver.counters().maps;
  vmm::DevicePtr r = f.arena.allocate(2 * kG, 0, &why);
  ASSERT_NE(r, 0u) << why;
  EXPECT_EQ(r, p);
  EXPECT_EQ(f.driver.counters().maps, maps);
  EXPECT_EQ(f.lender.parked(), 0u);
  fill(r, 2 * kG, 0x7c);
  EXPECT_TRUE(holds(q, 2 * kG, 0x6b));
  EXPECT_TRUE(f.arena.free(r, 1));
  EXPECT_TRUE(f.arena.free(q, 1));
  EXPECT_EQ(f.lender.parked(), 4u);
  EXPECT_EQ(f.arena.release_idle(), 5u);  // four parked, one idle own page
  EXPECT_EQ(f.arena.lent_pages(), 0u);
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  EXPECT_EQ(f.pool.idle_count(), 4u);
  EXPECT_EQ(f.lender.lent(), 0u);
}

// A planned slot that found a lent chunk taken wants it: once its page is empty it goes back to
// the pool instead of staying parked, with the streams that used it; other pages still park.
TEST(PackedArena, AWantedLentChunkIsGivenBackWhenItsPageEmpties) {
  LendingFixture f(2);
  f.lender.lend_any();
  std::string why;
  vmm::DevicePtr p = f.arena.allocate(2 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  fill(p, 2 * kG, 0x42);
  EXPECT_EQ(f.arena.lent_pages(), 2u);
  const ChunkPiece wanted{1, 0, static_cast<std::uint32_t>(kG / 2)};
  StreamMask sync_with = 0;
  EXPECT_FALSE(f.pool.try_occupy(std::span<const ChunkPiece>(&wanted, 1), &sync_with));
  f.lender.want(std::span<const ChunkPiece>(&wanted, 1));
  EXPECT_TRUE(f.lender.wanted(1));
  EXPECT_FALSE(f.lender.wanted(0));
  EXPECT_TRUE(f.arena.free(p, StreamSync::bit(1)));
  EXPECT_EQ(f.lender.parked(), 1u);  // chunk 0
  EXPECT_EQ(f.arena.lent_pages(), 1u);
  EXPECT_FALSE(f.lender.wanted(1));
  ASSERT_TRUE(f.pool.try_occupy(std::span<const ChunkPiece>(&wanted, 1), &sync_with));
  // The slot's tensor waits for the streams that used the page.
  EXPECT_EQ(sync_with, StreamSync::bit(0) | StreamSync::bit(1));
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

// A planned slot wanting a parked chunk gets it back at once, even while the GPU may still use
// the page: the chunk comes back with the page's streams (the slot's tensor waits for them on
// the GPU), and the page's bytes stay out of use until its unmap after its events.
TEST(PackedArena, ParkedChunkIsReclaimedAtOnceAndItsPageKeptOutOfUse) {
  LendingFixture f(1);
  f.lender.lend_any();
  std::string why;
  f.driver.hold_events(true);
  vmm::DevicePtr p = f.arena.allocate(1000, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_TRUE(f.arena.free(p, StreamSync::bit(0)));
  EXPECT_EQ(f.lender.parked(), 1u);
  EXPECT_EQ(f.pool.idle_count(), 0u);
  const ChunkPiece whole{0, 0, static_cast<std::uint32_t>(kG)};
  EXPECT_TRUE(f.lender.reclaim(std::span<const ChunkPiece>(&whole, 1)));
  EXPECT_EQ(f.lender.parked(), 0u);
  EXPECT_EQ(f.lender.lent(), 0u);
  EXPECT_EQ(f.pool.idle_count(), 1u);
  EXPECT_EQ(f.arena.mapped_pages(), 1u);  // unmapped once its events complete
  StreamMask sync = 0;
  ASSERT_TRUE(f.pool.try_occupy(std::span<const ChunkPiece>(&whole, 1), &sync));
  EXPECT_EQ(sync, StreamSync::bit(0));
  // The arena does not hand out the detached page's bytes meanwhile.
  vmm::DevicePtr q = f.arena.allocate(1000, 0, &why);
  ASSERT_NE(q, 0u) << why;
  EXPECT_GE(q, p + kG);
  EXPECT_TRUE(f.arena.free(q, StreamSync::bit(0)));
  f.driver.hold_events(false);
  f.arena.poll();
  EXPECT_EQ(f.arena.release_idle(), 1u);
  f.arena.poll();
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  vmm::DevicePtr r = f.arena.allocate(1000, 0, &why);
  EXPECT_EQ(r, p);  // the detached page's bytes are free again
  EXPECT_TRUE(f.arena.free(r, 1));
}

// With nothing idle in the pool, a chunk parked in one arena moves to another that needs a
// page, instead of a chunk being created beside the pool.
TEST(PackedArena, ParkedChunkMovesToAnotherArenaBeforeOneIsCreated) {
  LendingFixture f(1);
  ASSERT_EQ(f.sync.index_of(0x2000), 1u);
  PackedArena other(f.driver, f.memory, f.sync, kReservation, 1, 0, &f.lender);
  f.lender.lend_any();
  std::string why;
  vmm::DevicePtr p = f.arena.allocate(1000, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_TRUE(f.arena.free(p, StreamSync::bit(0)));
  EXPECT_EQ(f.lender.parked(), 1u);
  const auto creates = f.driver.counters().creates;
  vmm::DevicePtr q = other.allocate(kG, 1, &why);
  ASSERT_NE(q, 0u) << why;
  fill(q, kG, 0x3c);
  EXPECT_EQ(f.driver.counters().creates, creates);
  EXPECT_EQ(other.lent_pages(), 1u);
  EXPECT_EQ(f.arena.lent_pages(), 0u);
  EXPECT_EQ(f.lender.parked(), 0u);
  EXPECT_EQ(f.sync.waits(), 1u);  // stream 1 waits for stream 0's work on the chunk
  f.arena.poll();
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  EXPECT_TRUE(holds(q, kG, 0x3c));
  EXPECT_TRUE(other.free(q, StreamSync::bit(1)));
  EXPECT_EQ(other.release_idle(), 1u);
  EXPECT_EQ(f.pool.idle_count(), 1u);
}

// Two arenas borrow from an 8-chunk pool while "the plan" takes chunks back at random
// (reclaiming parked ones), writing through its own alias of each chunk, and the GPU is
// sometimes still busy. An independent check on the data: every live arena tensor and every
// chunk the plan holds keep their patterns, so no byte is ever in two hands.
TEST(PackedArena, LendingUnderRandomReclaimsNeverSharesAByte) {
  LendingFixture f(8);
  ASSERT_EQ(f.sync.index_of(0x2000), 1u);
  PackedArena other(f.driver, f.memory, f.sync, kReservation, 1, kG, &f.lender);
  PackedArena* arenas[2] = {&f.arena, &other};
  vmm::DevicePtr view = 0;
  ASSERT_EQ(f.driver.reserve(&view, 8 * kG), vmm::Status::Success);
  for (std::uint32_t c = 0; c < 8; ++c) {
    ASSERT_EQ(f.driver.map(view + c * kG, kG, 0, f.pool.handle(c)), vmm::Status::Success);
  }
  ASSERT_EQ(f.driver.set_access(view, 8 * kG, vmm::Access::ReadWrite), vmm::Status::Success);
  f.lender.lend_any();
  std::mt19937_64 rng(11);
  struct Live {
    int arena;
    vmm::DevicePtr p;
    std::uint64_t size;
    unsigned char tag;
  };
  std::vector<Live> live;
  std::vector<bool> held(8, false);
  std::string why;
  std::uint64_t reclaims = 0;
  for (int step = 0; step < 4000; ++step) {
    const auto roll = rng() % 100;
    if (roll < 40 || live.empty()) {
      const int a = static_cast<int>(rng() % 2);
      const std::uint64_t size = 1 + rng() % (2 * kG);
      const auto tag = static_cast<unsigned char>(1 + step % 200);
      vmm::DevicePtr p = arenas[a]->allocate(size, static_cast<std::uint32_t>(a), &why);
      ASSERT_NE(p, 0u) << why;
      fill(p, size, tag);
      live.push_back({a, p, size, tag});
    } else if (roll < 75) {
      const std::size_t i = rng() % live.size();
      ASSERT_TRUE(holds(live[i].p, live[i].size, live[i].tag)) << step;
      ASSERT_TRUE(arenas[live[i].arena]->free(live[i].p, StreamSync::bit(static_cast<std::uint32_t>(live[i].arena))));
      live[i] = live.back();
      live.pop_back();
    } else if (roll < 88) {
      const auto c = static_cast<std::uint32_t>(rng() % 8);
      const ChunkPiece whole{c, 0, static_cast<std::uint32_t>(kG)};
      StreamMask sync = 0;
      if (held[c]) {
        ASSERT_TRUE(holds(view + c * kG, kG, 0xEE)) << "chunk " << c << " step " << step;
        f.pool.vacate(std::span<const ChunkPiece>(&whole, 1), StreamSync::bit(0));
        held[c] = false;
      } else {
        bool ok = f.pool.try_occupy(std::span<const ChunkPiece>(&whole, 1), &sync);
        if (!ok && f.lender.reclaim(std::span<const ChunkPiece>(&whole, 1))) {
          ++reclaims;
          ok = f.pool.try_occupy(std::span<const ChunkPiece>(&whole, 1), &sync);
        }
        if (ok) {
          fill(view + c * kG, kG, 0xEE);
          held[c] = true;
        }
      }
    } else if (roll < 94) {
      f.driver.hold_events(rng() % 2 == 0);
    } else {
      f.arena.poll();
      other.poll();
    }
    if (step % 50 == 0) {
      for (const Live& l : live) ASSERT_TRUE(holds(l.p, l.size, l.tag)) << step;
      for (std::uint32_t c = 0; c < 8; ++c) {
        if (held[c]) {
          ASSERT_TRUE(holds(view + c * kG, kG, 0xEE)) << "chunk " << c << " step " << step;
        }
      }
    }
  }
  EXPECT_GT(reclaims, 0u);
  for (const Live& l : live) {
    EXPECT_TRUE(holds(l.p, l.size, l.tag));
    ASSERT_TRUE(arenas[l.arena]->free(l.p, 1));
  }
  f.driver.hold_events(false);
  f.arena.release_idle();
  other.release_idle();
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
  EXPECT_EQ(other.mapped_pages(), 0u);
  EXPECT_EQ(f.lender.lent(), 0u);
  for (std::uint32_t c = 0; c < 8; ++c) f.driver.unmap(view + c * kG, kG);
  f.driver.free_reservation(view, 8 * kG);
}

// Extents (an arena that makes one chunk for a run of up to 8 fresh pages at its high water).
ArenaFixture extent_arena(std::uint64_t held_share = 0) {
  return ArenaFixture(0, 1024, 1, ArenaExtents{8, held_share});
}

TEST(PackedArena, ARunOfFreshPagesIsOneChunkAtTheHighWater) {
  ArenaFixture f = extent_arena();
  std::string why;
  const auto before = f.driver.counters();
  vmm::DevicePtr p = f.arena.allocate(5 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  auto now = f.driver.counters();
  EXPECT_EQ(now.creates - before.creates, 1u);
  EXPECT_EQ(now.maps - before.maps, 1u);
  EXPECT_EQ(now.set_accesses - before.set_accesses, 1u);
  EXPECT_EQ(f.arena.mapped_pages(), 5u);
  EXPECT_EQ(f.memory.reserved_bytes(), 5 * kG);
  fill(p, 5 * kG, 3);
  EXPECT_TRUE(holds(p, 5 * kG, 3));
  // Freed, it stays mapped; made again, it costs no call.
  EXPECT_TRUE(f.arena.free(p, StreamSync::bit(0)));
  const auto kept = f.driver.counters();
  p = f.arena.allocate(5 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  now = f.driver.counters();
  EXPECT_EQ(now.creates + now.maps + now.set_accesses,
            kept.creates + kept.maps + kept.set_accesses);
  EXPECT_TRUE(f.arena.free(p, StreamSync::bit(0)));
  // Given up, the chunk is released whole (no page-sized chunk to cache).
  const auto released = f.driver.counters().releases;
  EXPECT_EQ(f.arena.give_idle_chunk(), 5 * kG);
  EXPECT_EQ(f.driver.counters().releases, released + 1);
  EXPECT_EQ(f.driver.counters().unmaps - now.unmaps, 1u);
  EXPECT_EQ(f.memory.reserved_bytes(), 0u);
  EXPECT_EQ(f.memory.cached_bytes(), 0u);
  EXPECT_EQ(f.arena.mapped_pages(), 0u);
}

TEST(PackedArena, BelowTheHighWaterEachPageGetsItsOwnChunk) {
  ArenaFixture f = extent_arena();
  std::string why;
  vmm::DevicePtr p = f.arena.allocate(4 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_TRUE(f.arena.free(p, StreamSync::bit(0)));
  ASSERT_EQ(f.arena.give_idle_chunk(), 4 * kG);
  ASSERT_EQ(f.memory.high_water_bytes(), 4 * kG);
  // Memory held again below the most ever held: a chunk per page, free to move one by one.
  const auto before = f.driver.counters();
  p = f.arena.allocate(3 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_EQ(f.driver.counters().creates - before.creates, 3u);
  EXPECT_EQ(f.driver.counters().maps - before.maps, 3u);
  fill(p, 3 * kG, 4);
  EXPECT_TRUE(holds(p, 3 * kG, 4));
  EXPECT_TRUE(f.arena.free(p, StreamSync::bit(0)));
  EXPECT_EQ(f.arena.give_idle_chunk(), kG);
  EXPECT_EQ(f.memory.cached_bytes(), kG);
}

TEST(PackedArena, AnExtentIsIdleOnlyWhenAllItsPagesAreEmpty) {
  ArenaFixture f = extent_arena();
  std::string why;
  vmm::DevicePtr x = f.arena.allocate(4 * kG, 0, &why);
  ASSERT_NE(x, 0u) << why;
  EXPECT_TRUE(f.arena.free(x, StreamSync::bit(0)));
  // A small tensor on its first page, a larger one over the rest: no call, the extent in use.
  const auto before = f.driver.counters();
  vmm::DevicePtr y = f.arena.allocate(kG / 2, 0, &why);
  ASSERT_NE(y, 0u) << why;
  EXPECT_EQ(y, x);
  vmm::DevicePtr z = f.arena.allocate(3 * kG, 0, &why);
  ASSERT_NE(z, 0u) << why;
  EXPECT_EQ(f.driver.counters().maps, before.maps);
  EXPECT_EQ(f.arena.give_idle_chunk(), 0u);
  fill(y, kG / 2, 1);
  fill(z, 3 * kG, 2);
  // Three of its pages are empty once z goes, but y holds the fourth: nothing to give.
  EXPECT_TRUE(f.arena.free(z, StreamSync::bit(0)));
  EXPECT_TRUE(holds(y, kG / 2, 1));
  EXPECT_EQ(f.arena.give_idle_chunk(), 0u);
  EXPECT_EQ(f.arena.occupied_own_pages(), 4u);
  EXPECT_EQ(f.arena.mapped_pages(), 4u);
  EXPECT_TRUE(f.arena.free(y, StreamSync::bit(0)));
  EXPECT_EQ(f.arena.occupied_own_pages(), 0u);
  EXPECT_EQ(f.arena.give_idle_chunk(), 4 * kG);
  EXPECT_EQ(f.memory.reserved_bytes(), 0u);
}

// cuMemSetAccess covers whole mappings (the host driver refuses a part of one): an allocation
// over the last page of one extent and two fresh pages sets access on both extents whole.
TEST(PackedArena, SetAccessCoversTheExtentsItTouchesWhole) {
  ArenaFixture f = extent_arena();
  std::string why;
  vmm::DevicePtr a = f.arena.allocate(3 * kG + kG / 2, 0, &why);
  ASSERT_NE(a, 0u) << why;
  ASSERT_EQ(f.arena.mapped_pages(), 4u);
  const auto before = f.driver.counters();
  vmm::DevicePtr b = f.arena.allocate(2 * kG, 0, &why);
  ASSERT_NE(b, 0u) << why;
  EXPECT_EQ(b, a + 3 * kG + kG / 2);
  const auto now = f.driver.counters();
  EXPECT_EQ(now.creates - before.creates, 1u);  // pages 4 and 5
  EXPECT_EQ(now.set_accesses - before.set_accesses, 1u);
  EXPECT_EQ(now.set_access_bytes - before.set_access_bytes, 6 * kG);
  fill(a, 3 * kG + kG / 2, 8);
  fill(b, 2 * kG, 9);
  EXPECT_TRUE(holds(a, 3 * kG + kG / 2, 8));
  EXPECT_TRUE(holds(b, 2 * kG, 9));
  EXPECT_TRUE(f.arena.free(a, StreamSync::bit(0)));
  EXPECT_TRUE(f.arena.free(b, StreamSync::bit(0)));
  EXPECT_EQ(f.arena.give_idle_chunk() + f.arena.give_idle_chunk(), 6 * kG);
  EXPECT_EQ(f.driver.counters().live_mappings, before.live_mappings - 1);
}

// At most 1/4 of the memory held: the limit grows with it. Pages made as memory is held
// (granules): 0..7 one at a time (held 8), then runs of 2 at 8 and 10, 3 at 12, the last one
// alone at 15.
TEST(PackedArena, AnExtentIsBoundedByTheMemoryHeld) {
  ArenaFixture f = extent_arena(4);
  std::string why;
  const auto before = f.driver.counters();
  vmm::DevicePtr p = f.arena.allocate(16 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_EQ(f.driver.counters().creates - before.creates, 12u);
  EXPECT_EQ(f.driver.counters().maps - before.maps, 12u);
  fill(p, 16 * kG, 5);
  EXPECT_TRUE(holds(p, 16 * kG, 5));
  EXPECT_TRUE(f.arena.free(p, StreamSync::bit(0)));
}

// A failed map or set-access leaves nothing behind; where the run's chunk cannot be made, its
// first page takes a chunk of its own and the rest of the run tries again.
TEST(PackedArena, ExtentFailuresAreRolledBackOrFallBackToPages) {
  for (vmm::CallMask kind : {vmm::CallMask::Map, vmm::CallMask::SetAccess}) {
    ArenaFixture f = extent_arena();
    std::string why;
    vmm::DevicePtr keep = f.arena.allocate(100, 0, &why);
    ASSERT_NE(keep, 0u) << why;
    const auto mappings = f.driver.counters().live_mappings;
    f.driver.fail_nth(1, kind);
    EXPECT_EQ(f.arena.allocate(3 * kG, 0, &why), 0u);
    EXPECT_EQ(f.driver.counters().live_mappings, mappings);
    EXPECT_EQ(f.arena.mapped_pages(), 1u);
    EXPECT_EQ(f.memory.reserved_bytes(), kG);
    vmm::DevicePtr p = f.arena.allocate(3 * kG, 0, &why);
    ASSERT_NE(p, 0u) << why;
    fill(p, 3 * kG, 7);
    EXPECT_TRUE(holds(p, 3 * kG, 7));
  }
  ArenaFixture f = extent_arena();
  std::string why;
  vmm::DevicePtr keep = f.arena.allocate(100, 0, &why);
  ASSERT_NE(keep, 0u) << why;
  const auto before = f.driver.counters();
  f.driver.fail_nth(1, vmm::CallMask::Create);
  vmm::DevicePtr p = f.arena.allocate(3 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  // Page 1 on a chunk of its own, then pages 2 and 3 on one.
  EXPECT_EQ(f.driver.counters().creates - before.creates, 2u);
  EXPECT_EQ(f.driver.counters().maps - before.maps, 2u);
  EXPECT_EQ(f.arena.mapped_pages(), 4u);
  fill(p, 3 * kG, 7);
  EXPECT_TRUE(holds(p, 3 * kG, 7));
}

}  // namespace
}  // namespace stalloc
