#include "src/free_markers.h"

#include <gtest/gtest.h>

#include "tests/runtime/runtime_test_support.h"
#include "vmm/fault_injecting_driver.h"

namespace stalloc {
namespace {

using namespace testing_support;

struct MarkersFixture {
  MarkersFixture() : host(host_driver()), driver(*host), sync(driver), markers(sync) {}
  std::unique_ptr<vmm::Driver> host;
  vmm::FaultInjectingDriver driver;
  StreamSync sync;
  FreeMarkers markers;
};

// Memory no stream used has nothing to wait for: no marker.
TEST(FreeMarkers, NothingToWaitForGivesNoMarker) {
  MarkersFixture f;
  EXPECT_EQ(f.markers.take(0), FreeMarkers::kNone);
  f.markers.end_free(FreeMarkers::kNone);
  f.markers.release(FreeMarkers::kNone);
  EXPECT_EQ(f.driver.counters().event_records, 0u);
}

// The frees of a stretch share one marker, recorded after the last of them: one event record
// per kFreesPerMarker frees. The next free opens another.
TEST(FreeMarkers, FreesShareOneMarkerRecordedAfterTheLast) {
  MarkersFixture f;
  std::vector<std::uint32_t> taken;
  for (std::uint32_t i = 0; i < FreeMarkers::kFreesPerMarker; ++i) {
    EXPECT_EQ(f.driver.counters().event_records, 0u) << i;
    taken.push_back(f.markers.take(StreamSync::bit(0)));
    f.markers.end_free(taken.back());
  }
  EXPECT_EQ(f.driver.counters().event_records, 1u);
  for (std::uint32_t m : taken) EXPECT_EQ(m, taken.front());
  const std::uint32_t next = f.markers.take(StreamSync::bit(0));
  f.markers.end_free(next);
  EXPECT_NE(next, taken.front());
  EXPECT_EQ(f.driver.counters().event_records, 1u);
  EXPECT_TRUE(f.markers.done(taken.front()));
  for (std::uint32_t m : taken) f.markers.release(m);
  f.markers.release(next);
}

// Memory wanted before its stretch ends: its marker is recorded then, and is done only when
// the GPU is (events held: not yet).
TEST(FreeMarkers, AMarkerWantedEarlyIsRecordedThenAndDoneWhenTheGpuIs) {
  MarkersFixture f;
  const std::uint32_t m = f.markers.take(StreamSync::bit(0));
  f.markers.add_holder(m);  // a second page of the same free
  f.markers.end_free(m);
  EXPECT_EQ(f.driver.counters().event_records, 0u);
  f.driver.hold_events(true);
  EXPECT_FALSE(f.markers.done(m));
  EXPECT_EQ(f.driver.counters().event_records, 1u);
  // Recorded: the next free opens a new marker.
  const std::uint32_t next = f.markers.take(StreamSync::bit(0));
  EXPECT_NE(next, m);
  f.driver.hold_events(false);
  EXPECT_TRUE(f.markers.done(m));
  EXPECT_EQ(f.driver.counters().event_records, 1u);
  f.markers.release(m);
  f.markers.release(m);  // both holders gone: the marker is recycled
  f.markers.end_free(next);
  f.markers.release(next);
  const std::uint32_t again = f.markers.take(StreamSync::bit(0));
  EXPECT_TRUE(again == m || again == next);
  f.markers.release(again);
}

}  // namespace
}  // namespace stalloc
