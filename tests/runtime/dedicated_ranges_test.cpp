#include "src/dedicated_ranges.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "tests/runtime/runtime_test_support.h"
#include "vmm/fault_injecting_driver.h"

namespace stalloc {
namespace {

using namespace testing_support;

struct RangesFixture {
  explicit RangesFixture(std::uint64_t capacity = 0)
      : host(host_driver()), driver(*host), sync(driver), memory(driver, kG, capacity),
        ranges(driver, memory, sync) {}
  // A range of `granules` freed while the GPU still runs on it: events are held from now on.
  vmm::DevicePtr busy_cached(std::uint64_t granules) {
    std::string why;
    const vmm::DevicePtr p = ranges.allocate(granules * kG, 0, &why);
    EXPECT_NE(p, 0u) << why;
    driver.hold_events(true);
    EXPECT_TRUE(ranges.free(p, StreamSync::bit(0)));
    return p;
  }
  std::unique_ptr<vmm::Driver> host;
  vmm::FaultInjectingDriver driver;
  StreamSync sync;
  PhysicalMemory memory;
  DedicatedRanges ranges;
};

bool holds(vmm::DevicePtr p, std::uint64_t size, unsigned char value) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  for (std::uint64_t i = 0; i < size; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

// Every mapping, reservation and chunk given back.
void expect_nothing_left(const vmm::DriverCounters& c) {
  EXPECT_EQ(c.live_mappings, 0u);
  EXPECT_EQ(c.live_reservations, 0u);
  EXPECT_EQ(c.live_chunks, 0u);
}

TEST(DedicatedRanges, ATensorIsOneChunkOneMappingOneAccessCall) {
  RangesFixture f;
  std::string why;
  const auto before = f.driver.counters();
  const std::uint64_t size = 40 * kG + 100;  // rounded up to 41 granules
  vmm::DevicePtr p = f.ranges.allocate(size, 0, &why);
  ASSERT_NE(p, 0u) << why;
  const auto after = f.driver.counters();
  EXPECT_EQ(after.creates - before.creates, 1u);
  EXPECT_EQ(after.reserves - before.reserves, 1u);
  EXPECT_EQ(after.maps - before.maps, 1u);
  EXPECT_EQ(after.set_accesses - before.set_accesses, 1u);
  EXPECT_EQ(f.memory.reserved_bytes(), 41 * kG);
  EXPECT_EQ(f.ranges.live_bytes(), size);
  std::memset(reinterpret_cast<void*>(p), 0x5a, size);
  EXPECT_TRUE(holds(p, size, 0x5a));
  EXPECT_TRUE(f.ranges.free(p, StreamSync::bit(0)));
  EXPECT_FALSE(f.ranges.free(p, StreamSync::bit(0)));
  EXPECT_EQ(f.ranges.cached_ranges(), 1u);
}

TEST(DedicatedRanges, TheSameSizeAgainTakesTheCachedRangeWithNoCall) {
  RangesFixture f;
  std::string why;
  vmm::DevicePtr p = f.ranges.allocate(10 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  ASSERT_TRUE(f.ranges.free(p, StreamSync::bit(0)));
  const auto before = f.driver.counters();
  vmm::DevicePtr q = f.ranges.allocate(10 * kG - 7, 0, &why);  // the same rounded size
  EXPECT_EQ(q, p);
  const auto after = f.driver.counters();
  EXPECT_EQ(after.creates + after.maps + after.unmaps + after.set_accesses + after.reserves,
            before.creates + before.maps + before.unmaps + before.set_accesses + before.reserves);
  EXPECT_EQ(f.ranges.cached_ranges(), 0u);
}

TEST(DedicatedRanges, BelowTheMostEverHeldAMissKeepsTheCache) {
  RangesFixture f;
  std::string why;
  vmm::DevicePtr a = f.ranges.allocate(10 * kG, 0, &why);
  vmm::DevicePtr b = f.ranges.allocate(6 * kG, 0, &why);
  ASSERT_TRUE(f.ranges.free(a, StreamSync::bit(0)));
  ASSERT_TRUE(f.ranges.free(b, StreamSync::bit(0)));
  vmm::DevicePtr c = f.ranges.allocate(12 * kG, 0, &why);  // 16 + 12 > 16: 12 over
  ASSERT_NE(c, 0u) << why;
  ASSERT_TRUE(f.ranges.free(c, StreamSync::bit(0)));
  EXPECT_EQ(f.memory.reserved_bytes(), 12 * kG);
  EXPECT_EQ(f.memory.high_water_bytes(), 16 * kG);
  // 12 cached, 4 of room below the high-water mark: a 3-granule tensor is created beside the
  // cached range, which stays for its next tensor.
  const auto releases = f.driver.counters().releases;
  vmm::DevicePtr d = f.ranges.allocate(3 * kG, 0, &why);
  ASSERT_NE(d, 0u) << why;
  EXPECT_EQ(f.driver.counters().releases, releases);
  EXPECT_EQ(f.ranges.cached_ranges(), 1u);
  EXPECT_EQ(f.memory.reserved_bytes(), 15 * kG);
  EXPECT_EQ(f.ranges.allocate(12 * kG, 0, &why), c);  // the cached one, no call
  EXPECT_EQ(f.memory.peak_reserved_bytes(), 16 * kG);
}

TEST(DedicatedRanges, AnotherSizeReleasesCachedRangesBeforeCreating) {
  RangesFixture f;
  std::string why;
  vmm::DevicePtr a = f.ranges.allocate(10 * kG, 0, &why);
  vmm::DevicePtr b = f.ranges.allocate(6 * kG, 0, &why);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  ASSERT_TRUE(f.ranges.free(a, StreamSync::bit(0)));
  ASSERT_TRUE(f.ranges.free(b, StreamSync::bit(0)));
  EXPECT_EQ(f.memory.reserved_bytes(), 16 * kG);
  // 12 granules: the oldest cached range (10) is not enough, the next (6) goes too.
  vmm::DevicePtr c = f.ranges.allocate(12 * kG, 0, &why);
  ASSERT_NE(c, 0u) << why;
  EXPECT_EQ(f.ranges.cached_ranges(), 0u);
  EXPECT_EQ(f.memory.reserved_bytes(), 12 * kG);
  EXPECT_EQ(f.memory.peak_reserved_bytes(), 16 * kG);  // never both
  EXPECT_EQ(f.driver.counters().live_mappings, 1u);
  EXPECT_EQ(f.driver.counters().live_reservations, 1u);
}

TEST(DedicatedRanges, ARangeTheGpuStillUsesIsNotReleased) {
  RangesFixture f;
  std::string why;
  f.busy_cached(8);  // the GPU has not reached the events recorded at the free
  // 3 granules: the busy 8 are more than twice that, so neither served nor shared.
  vmm::DevicePtr b = f.ranges.allocate(3 * kG, 0, &why);
  ASSERT_NE(b, 0u) << why;
  EXPECT_EQ(f.ranges.cached_ranges(), 1u);  // kept: its kernels may still run
  EXPECT_EQ(f.memory.reserved_bytes(), 11 * kG);
  EXPECT_EQ(f.ranges.release_cached(), 0u);
  f.driver.hold_events(false);
  EXPECT_EQ(f.ranges.release_cached(), 1u);
  EXPECT_EQ(f.memory.reserved_bytes(), 3 * kG);
}

TEST(DedicatedRanges, WhileTheGpuIsBehindASlightlyLargerRangeServesAMissInStreamOrder) {
  RangesFixture f;
  std::string why;
  const vmm::DevicePtr a = f.busy_cached(9);
  const auto creates = f.driver.counters().creates;
  // 8 granules: the cached 9 are within 1/8 more, and nothing can be released for a new range.
  vmm::DevicePtr b = f.ranges.allocate(8 * kG, 0, &why);
  EXPECT_EQ(b, a);
  EXPECT_EQ(f.ranges.served_behind_gpu(), 1u);
  EXPECT_EQ(f.driver.counters().creates, creates);
  EXPECT_EQ(f.memory.reserved_bytes(), 9 * kG);
  EXPECT_EQ(f.ranges.live_bytes(), 8 * kG);
  EXPECT_EQ(f.ranges.cached_ranges(), 0u);
  std::memset(reinterpret_cast<void*>(b), 0x3c, 8 * kG);
  EXPECT_TRUE(holds(b, 8 * kG, 0x3c));
  ASSERT_TRUE(f.ranges.free(b, StreamSync::bit(0)));
  // 4 granules: 9 is more than 1/8 above it and more than twice it, so a range is made beside
  // the busy one.
  vmm::DevicePtr c = f.ranges.allocate(4 * kG, 0, &why);
  ASSERT_NE(c, 0u) << why;
  EXPECT_NE(c, a);
  EXPECT_EQ(f.memory.reserved_bytes(), 13 * kG);
  EXPECT_EQ(f.ranges.cached_ranges(), 1u);
  EXPECT_EQ(f.ranges.served_behind_gpu(), 1u);
}

TEST(DedicatedRanges, WhileTheGpuIsBehindTensorsShareACachedRangeInStreamOrder) {
  RangesFixture f;
  std::string why;
  const vmm::DevicePtr a = f.busy_cached(8);
  const auto creates = f.driver.counters().creates;
  const auto maps = f.driver.counters().maps;
  // Two tensors of 4 granules and 100 bytes (5 granules taken each) do not both fit; one of 5
  // and one of 3 do, back to back in the busy range, with no driver call.
  vmm::DevicePtr b = f.ranges.allocate(4 * kG + 100, 0, &why);
  EXPECT_EQ(b, a);
  vmm::DevicePtr c = f.ranges.allocate(3 * kG, 0, &why);
  EXPECT_EQ(c, a + 5 * kG);
  EXPECT_EQ(f.driver.counters().creates, creates);
  EXPECT_EQ(f.driver.counters().maps, maps);
  EXPECT_EQ(f.memory.reserved_bytes(), 8 * kG);
  EXPECT_EQ(f.ranges.live_bytes(), 7 * kG + 100);
  EXPECT_EQ(f.ranges.live_range_bytes(), 8 * kG);
  EXPECT_EQ(f.ranges.cached_ranges(), 0u);
  std::memset(reinterpret_cast<void*>(b), 0x11, 4 * kG + 100);
  std::memset(reinterpret_cast<void*>(c), 0x22, 3 * kG);
  EXPECT_TRUE(holds(b, 4 * kG + 100, 0x11));
  EXPECT_TRUE(holds(c, 3 * kG, 0x22));
  // The first goes: its 5 granules are the gap a tensor of 2 takes, at the range's start.
  ASSERT_TRUE(f.ranges.free(b, StreamSync::bit(0)));
  vmm::DevicePtr d = f.ranges.allocate(2 * kG, 0, &why);
  EXPECT_EQ(d, a);
  ASSERT_TRUE(f.ranges.free(c, StreamSync::bit(0)));
  EXPECT_EQ(f.ranges.cached_ranges(), 0u);  // still shared with d
  ASSERT_TRUE(f.ranges.free(d, StreamSync::bit(0)));
  EXPECT_FALSE(f.ranges.free(d, StreamSync::bit(0)));
  // The last tensor gone, the range is cached whole, and released once the GPU is done.
  EXPECT_EQ(f.ranges.cached_ranges(), 1u);
  EXPECT_EQ(f.ranges.live_bytes(), 0u);
  EXPECT_EQ(f.ranges.release_cached(), 0u);
  f.driver.hold_events(false);
  EXPECT_EQ(f.ranges.release_cached(), 1u);
  EXPECT_EQ(f.memory.reserved_bytes(), 0u);
  EXPECT_EQ(f.driver.counters().live_mappings, 0u);
}

// Busy cached ranges of 5 and 3 granules, both freed while the GPU runs on them.
// Cached ranges of 5 and 3 granules, the GPU still running on them (gpu_behind) or done.
struct StitchFixture : RangesFixture {
  explicit StitchFixture(bool gpu_behind = true) {
    std::string why;
    five = ranges.allocate(5 * kG, 0, &why);
    three = ranges.allocate(3 * kG, 0, &why);
    EXPECT_NE(five, 0u) << why;
    EXPECT_NE(three, 0u) << why;
    driver.hold_events(gpu_behind);
    EXPECT_TRUE(ranges.free(five, StreamSync::bit(0)));
    EXPECT_TRUE(ranges.free(three, StreamSync::bit(0)));
  }
  vmm::DevicePtr five = 0;
  vmm::DevicePtr three = 0;
};

// A miss larger than every cached range, with nothing the GPU is done with: the cached ranges
// are mapped again side by side for it (their chunks, no new one), one access call, and their
// own mappings stay. Freed, they are cached again at once and the stitch stays mapped; a part
// is released only with the stitch's mappings, once the GPU is done.
TEST(DedicatedRanges, WhileTheGpuIsBehindAMissLargerThanAnyCachedRangeIsStitchedFromThem) {
  StitchFixture f;
  std::string why;
  const auto before = f.driver.counters();
  vmm::DevicePtr p = f.ranges.allocate(8 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  const auto after = f.driver.counters();
  EXPECT_EQ(after.creates, before.creates);
  EXPECT_EQ(after.maps, before.maps + 2);
  EXPECT_EQ(after.set_accesses, before.set_accesses + 1);
  EXPECT_EQ(after.live_mappings, 4u);
  EXPECT_EQ(f.memory.reserved_bytes(), 8 * kG);
  EXPECT_EQ(f.ranges.cached_ranges(), 0u);
  EXPECT_EQ(f.ranges.live_bytes(), 8 * kG);
  EXPECT_EQ(f.ranges.live_range_bytes(), 8 * kG);
  EXPECT_EQ(f.ranges.served_behind_gpu(), 1u);
  // The larger part first; each part's bytes are the same memory under its own address.
  std::memset(reinterpret_cast<void*>(p), 0x5a, 5 * kG);
  std::memset(reinterpret_cast<void*>(p + 5 * kG), 0xa5, 3 * kG);
  EXPECT_TRUE(holds(f.five, 5 * kG, 0x5a));
  EXPECT_TRUE(holds(f.three, 3 * kG, 0xa5));
  ASSERT_TRUE(f.ranges.free(p, StreamSync::bit(0)));
  EXPECT_EQ(f.ranges.cached_ranges(), 2u);
  EXPECT_EQ(f.driver.counters().live_mappings, 4u);  // the GPU may still use the stitch
  EXPECT_EQ(f.ranges.release_cached(), 0u);
  // The same size again takes a part back in stream order, with no call.
  const auto maps = f.driver.counters().maps;
  EXPECT_EQ(f.ranges.allocate(3 * kG, 0, &why), f.three);
  EXPECT_EQ(f.driver.counters().maps, maps);
  ASSERT_TRUE(f.ranges.free(f.three, StreamSync::bit(0)));
  f.driver.hold_events(false);
  EXPECT_EQ(f.ranges.release_cached(), 2u);
  const auto end = f.driver.counters();
  expect_nothing_left(end);
  EXPECT_EQ(f.memory.reserved_bytes(), 0u);
}

// Cached ranges that cannot cover a miss together are not stitched: the miss makes its range.
TEST(DedicatedRanges, CachedRangesTooSmallTogetherAreNotStitched) {
  StitchFixture f;
  std::string why;
  const auto creates = f.driver.counters().creates;
  vmm::DevicePtr p = f.ranges.allocate(9 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  EXPECT_EQ(f.driver.counters().creates, creates + 1);
  EXPECT_EQ(f.ranges.cached_ranges(), 2u);
  EXPECT_EQ(f.ranges.served_behind_gpu(), 0u);
}

// A stitch on another stream waits for the parts' stream; a failed map or access call undoes
// the stitch (the parts stay cached) and the miss makes its own range.
TEST(DedicatedRanges, AStitchIsOrderedAfterItsPartsAndRolledBackWhenACallFails) {
  {
    StitchFixture f;
    std::string why;
    const std::uint32_t second = f.sync.index_of(0x1234);
    const auto waits = f.driver.counters().stream_waits;
    ASSERT_NE(f.ranges.allocate(8 * kG, second, &why), 0u) << why;
    EXPECT_EQ(f.driver.counters().stream_waits, waits + 1);
    EXPECT_EQ(f.ranges.served_behind_gpu(), 1u);
  }
  for (auto [kind, nth] : {std::pair{vmm::CallMask::Map, 2}, std::pair{vmm::CallMask::SetAccess, 1},
                           std::pair{vmm::CallMask::Reserve, 1}}) {
    StitchFixture f;
    std::string why;
    f.driver.fail_nth(static_cast<std::uint64_t>(nth), kind);
    vmm::DevicePtr p = f.ranges.allocate(8 * kG, 0, &why);
    ASSERT_NE(p, 0u) << why;  // made after the failed stitch
    const auto c = f.driver.counters();
    EXPECT_EQ(f.ranges.served_behind_gpu(), 0u);
    EXPECT_EQ(f.ranges.cached_ranges(), 2u);
    EXPECT_EQ(c.live_mappings, 3u);
    EXPECT_EQ(c.live_reservations, 3u);
    EXPECT_EQ(f.memory.reserved_bytes(), 16 * kG);
    std::memset(reinterpret_cast<void*>(p), 7, 8 * kG);
    EXPECT_TRUE(holds(p, 8 * kG, 7));
  }
}

// Torn down with a stitch live and another's mappings pending, nothing is left behind.
TEST(DedicatedRanges, TeardownWithStitchesLeavesNothing) {
  auto host = host_driver();
  vmm::FaultInjectingDriver driver(*host);
  {
    StreamSync sync(driver);
    PhysicalMemory memory(driver, kG, 0);
    DedicatedRanges ranges(driver, memory, sync);
    std::string why;
    std::vector<vmm::DevicePtr> parts;
    for (std::uint64_t g : {5, 3, 4, 2}) parts.push_back(ranges.allocate(g * kG, 0, &why));
    driver.hold_events(true);
    for (vmm::DevicePtr p : parts) ASSERT_TRUE(ranges.free(p, StreamSync::bit(0)));
    const vmm::DevicePtr pending = ranges.allocate(8 * kG, 0, &why);  // 5 + 3
    ASSERT_NE(pending, 0u) << why;
    ASSERT_TRUE(ranges.free(pending, StreamSync::bit(0)));
    ASSERT_NE(ranges.allocate(9 * kG, 0, &why), 0u) << why;  // 5 + 4: live at teardown
    EXPECT_EQ(ranges.served_behind_gpu(), 2u);
    EXPECT_EQ(memory.reserved_bytes(), 14 * kG);
  }
  const auto c = driver.counters();
  expect_nothing_left(c);
}

// Training's sizes come in phases (the forward pass's activations, then the backward's
// gradients). At the most ever held, a miss that cached ranges the GPU is done with add up to
// exactly is stitched from them rather than paid for by releasing them: the parts' own sizes
// come back with no call, and so does the stitch's, kept mapped while its parts are cached.
TEST(DedicatedRanges, AtTheMostEverHeldCachedRangesThatAddUpToAMissAreStitchedAndKept) {
  StitchFixture f(/*gpu_behind=*/false);
  std::string why;
  const vmm::DevicePtr five = f.five;
  const vmm::DevicePtr three = f.three;
  const auto before = f.driver.counters();
  const vmm::DevicePtr p = f.ranges.allocate(8 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  auto c = f.driver.counters();
  EXPECT_EQ(c.creates, before.creates);
  EXPECT_EQ(c.releases, before.releases);
  EXPECT_EQ(c.unmaps, before.unmaps);
  EXPECT_EQ(c.maps, before.maps + 2);
  EXPECT_EQ(c.set_accesses, before.set_accesses + 1);
  EXPECT_EQ(f.memory.reserved_bytes(), 8 * kG);
  EXPECT_EQ(f.ranges.served_behind_gpu(), 0u);
  std::memset(reinterpret_cast<void*>(p), 0x3c, 8 * kG);
  EXPECT_TRUE(holds(five, 5 * kG, 0x3c));
  EXPECT_TRUE(holds(three, 3 * kG, 0x3c));
  ASSERT_TRUE(f.ranges.free(p, StreamSync::bit(0)));
  EXPECT_EQ(f.driver.counters().live_mappings, 4u);  // the stitch stays mapped
  const auto kept = f.driver.counters();
  auto calls = [](const vmm::DriverCounters& k) {
    return k.creates + k.releases + k.reserves + k.maps + k.unmaps + k.set_accesses;
  };
  // A part's size, then the stitch's again: no call either time.
  const vmm::DevicePtr q = f.ranges.allocate(5 * kG, 0, &why);
  EXPECT_EQ(q, five);
  ASSERT_TRUE(f.ranges.free(q, StreamSync::bit(0)));
  const vmm::DevicePtr r = f.ranges.allocate(8 * kG - 100, 0, &why);
  EXPECT_EQ(r, p);
  EXPECT_EQ(calls(f.driver.counters()), calls(kept));
  EXPECT_EQ(f.ranges.live_bytes(), 8 * kG - 100);
  EXPECT_EQ(f.memory.peak_reserved_bytes(), 8 * kG);
  std::memset(reinterpret_cast<void*>(r), 0x5e, 8 * kG - 100);
  EXPECT_TRUE(holds(five, 5 * kG, 0x5e));
  ASSERT_TRUE(f.ranges.free(r, StreamSync::bit(0)));
  // Released, the parts take the stitch's mappings with them.
  EXPECT_EQ(f.ranges.release_cached(), 2u);
  expect_nothing_left(f.driver.counters());
}

// A cached stitch one of whose parts is live is not handed out; when that part's neighbour is
// released for a miss, the stitch's mappings go first (a chunk is never released while a
// stitch maps it).
TEST(DedicatedRanges, ACachedStitchWithALivePartIsNotTakenAndGoesBeforeItsPartsAreReleased) {
  StitchFixture f(/*gpu_behind=*/false);
  std::string why;
  const vmm::DevicePtr three = f.three;
  const vmm::DevicePtr p = f.ranges.allocate(8 * kG, 0, &why);
  ASSERT_NE(p, 0u) << why;
  ASSERT_TRUE(f.ranges.free(p, StreamSync::bit(0)));
  ASSERT_EQ(f.ranges.allocate(3 * kG, 0, &why), three);
  // 8 again: the stitch's part of 3 is live, and the cached 5 alone is not enough: the 5 is
  // released (the stitch unmapped before it) and a range of 8 made.
  const auto before = f.driver.counters();
  const vmm::DevicePtr q = f.ranges.allocate(8 * kG, 0, &why);
  ASSERT_NE(q, 0u) << why;
  const auto c = f.driver.counters();
  EXPECT_EQ(c.creates, before.creates + 1);
  EXPECT_EQ(c.releases, before.releases + 1);
  EXPECT_EQ(c.unmaps, before.unmaps + 3);  // the stitch's two mappings, then the 5's own
  EXPECT_EQ(c.live_mappings, 2u);
  EXPECT_EQ(f.memory.reserved_bytes(), 11 * kG);
  std::memset(reinterpret_cast<void*>(q), 1, 8 * kG);
  std::memset(reinterpret_cast<void*>(three), 2, 3 * kG);
  EXPECT_TRUE(holds(q, 8 * kG, 1));
  EXPECT_TRUE(holds(three, 3 * kG, 2));
}

// Freed stitches kept mapped are bounded: past 64, the oldest are unmapped (their parts stay
// cached under their own addresses).
TEST(DedicatedRanges, AtMostSixtyFourFreedStitchesStayMapped) {
  RangesFixture f;
  std::string why;
  constexpr std::uint64_t kSingles = 140;
  std::vector<vmm::DevicePtr> singles;
  for (std::uint64_t i = 0; i < kSingles; ++i) singles.push_back(f.ranges.allocate(kG, 0, &why));
  for (vmm::DevicePtr p : singles) ASSERT_TRUE(f.ranges.free(p, StreamSync::bit(0)));
  std::vector<vmm::DevicePtr> stitches;
  for (std::uint64_t i = 0; i < kSingles / 2; ++i) {
    stitches.push_back(f.ranges.allocate(2 * kG, 0, &why));
    ASSERT_NE(stitches.back(), 0u) << why;
  }
  EXPECT_EQ(f.driver.counters().creates, kSingles);
  EXPECT_EQ(f.driver.counters().live_mappings, kSingles * 2);
  for (vmm::DevicePtr p : stitches) ASSERT_TRUE(f.ranges.free(p, StreamSync::bit(0)));
  EXPECT_EQ(f.driver.counters().live_mappings, kSingles + 64 * 2);
  EXPECT_EQ(f.ranges.cached_ranges(), kSingles);
  EXPECT_EQ(f.memory.reserved_bytes(), kSingles * kG);
}

TEST(DedicatedRanges, ASharedRangeOnAnotherStreamIsOrderedAfterTheFirst) {
  RangesFixture f;
  std::string why;
  const std::uint32_t second = f.sync.index_of(0x1234);
  const vmm::DevicePtr a = f.busy_cached(8);
  const auto waits = f.driver.counters().stream_waits;
  EXPECT_EQ(f.ranges.allocate(4 * kG, second, &why), a);
  EXPECT_EQ(f.driver.counters().stream_waits, waits + 1);
}

TEST(DedicatedRanges, ALargerRangeTheGpuIsDoneWithIsReleasedNotReused) {
  RangesFixture f;
  std::string why;
  vmm::DevicePtr a = f.ranges.allocate(9 * kG, 0, &why);
  ASSERT_NE(a, 0u) << why;
  ASSERT_TRUE(f.ranges.free(a, StreamSync::bit(0)));
  vmm::DevicePtr b = f.ranges.allocate(8 * kG, 0, &why);
  ASSERT_NE(b, 0u) << why;
  EXPECT_EQ(f.ranges.cached_ranges(), 0u);
  EXPECT_EQ(f.memory.reserved_bytes(), 8 * kG);  // the 9 released, 8 made: no granule wasted
  EXPECT_EQ(f.ranges.served_behind_gpu(), 0u);
}

TEST(DedicatedRanges, ReuseOnAnotherStreamWaitsForTheFirst) {
  RangesFixture f;
  std::string why;
  const std::uint32_t second = f.sync.index_of(0x1234);
  vmm::DevicePtr a = f.ranges.allocate(8 * kG, 0, &why);
  ASSERT_TRUE(f.ranges.free(a, StreamSync::bit(0)));
  const auto waits = f.driver.counters().stream_waits;
  EXPECT_EQ(f.ranges.allocate(8 * kG, second, &why), a);
  EXPECT_EQ(f.driver.counters().stream_waits, waits + 1);
}

TEST(DedicatedRanges, OverTheCapacityFailsWithAReasonAndLeavesNothing) {
  RangesFixture f(16 * kG);
  std::string why;
  vmm::DevicePtr a = f.ranges.allocate(10 * kG, 0, &why);
  ASSERT_NE(a, 0u);
  EXPECT_EQ(f.ranges.allocate(10 * kG, 0, &why), 0u);
  EXPECT_NE(why.find("capacity"), std::string::npos) << why;
  EXPECT_EQ(f.driver.counters().live_mappings, 1u);
  EXPECT_EQ(f.driver.counters().live_reservations, 1u);
  EXPECT_EQ(f.memory.reserved_bytes(), 10 * kG);
}

TEST(DedicatedRanges, EveryFailedDriverCallIsRolledBack) {
  for (vmm::CallMask kind : {vmm::CallMask::Create, vmm::CallMask::Reserve, vmm::CallMask::Map,
                             vmm::CallMask::SetAccess}) {
    RangesFixture f;
    std::string why;
    f.driver.fail_nth(1, kind);
    EXPECT_EQ(f.ranges.allocate(8 * kG, 0, &why), 0u);
    EXPECT_FALSE(why.empty());
    const auto c = f.driver.counters();
    EXPECT_EQ(c.live_mappings, 0u);
    EXPECT_EQ(c.live_reservations, 0u);
    EXPECT_EQ(c.live_chunks, 0u);
    EXPECT_EQ(f.memory.reserved_bytes(), 0u);
    vmm::DevicePtr p = f.ranges.allocate(8 * kG, 0, &why);
    ASSERT_NE(p, 0u) << why;
    std::memset(reinterpret_cast<void*>(p), 1, 8 * kG);
    EXPECT_TRUE(holds(p, 8 * kG, 1));
  }
}

}  // namespace
}  // namespace stalloc
