#include "trace/trace.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace stalloc {
namespace {

Event alloc(std::uint64_t id, std::uint64_t size) {
  Event e;
  e.kind = EventKind::Alloc;
  e.id = id;
  e.size = size;
  return e;
}

Event release(std::uint64_t id, std::uint64_t size) {
  Event e = alloc(id, size);
  e.kind = EventKind::Free;
  return e;
}

TEST(Trace, LifetimesAndLowerBound) {
  Trace t;
  t.events = {alloc(1, 100), alloc(2, 50), release(1, 100), alloc(3, 70), release(3, 70)};
  auto l = compute_lifetimes(t);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].start, 0u);
  EXPECT_EQ(l[0].end, 2u);
  EXPECT_FALSE(l[0].persistent);
  EXPECT_TRUE(l[1].persistent);
  EXPECT_EQ(l[1].end, 5u);
  EXPECT_EQ(lower_bound_bytes(t), 150u);
}

TEST(Trace, RejectsDoubleAllocAndUnknownFree) {
  Trace t;
  t.events = {alloc(1, 10), alloc(1, 10)};
  EXPECT_THROW(compute_lifetimes(t), UsageError);
  EXPECT_NE(validate_trace(t).find("event 1"), std::string::npos);
  t.events = {release(7, 10)};
  EXPECT_NE(validate_trace(t).find("not live"), std::string::npos);
}

// Well-formed lies are named, with the event and what was wrong: a free that gives another size
// or another stream than its allocation's, an allocation no device can hold, time going back.
TEST(Trace, RejectsFreesThatLieAndSizesNoDeviceHolds) {
  Trace t;
  t.events = {alloc(1, 100), release(1, 101)};
  EXPECT_NE(validate_trace(t).find("event 1: free of id 1 gives 101 bytes, its allocation (event 0) 100"),
            std::string::npos)
      << validate_trace(t);
  t.events = {alloc(1, 100), release(1, 99)};
  EXPECT_NE(validate_trace(t).find("gives 99 bytes"), std::string::npos);
  t.events = {alloc(1, 100), release(1, 100)};
  t.events[1].stream = 2;
  EXPECT_NE(validate_trace(t).find("on stream 2, allocated on stream 0"), std::string::npos)
      << validate_trace(t);
  t.events = {alloc(1, kMaxTraceBytes + 1)};
  EXPECT_NE(validate_trace(t).find("larger than any device"), std::string::npos);
  EXPECT_THROW(compute_lifetimes(t), UsageError);
  t.events = {alloc(1, kMaxTraceBytes)};
  EXPECT_EQ(validate_trace(t), "");
  t.events = {alloc(1, kMaxTraceBytes), alloc(2, 1)};
  EXPECT_NE(validate_trace(t).find("event 1: the live allocations add up to"), std::string::npos);
  t.events = {alloc(1, 10), alloc(2, 10), release(1, 10)};
  t.events[0].time_ns = 500;
  t.events[1].time_ns = -1;  // unknown: not compared
  t.events[2].time_ns = 400;
  EXPECT_NE(validate_trace(t).find("event 2: time stamp 400 ns is before the previous one, 500 ns"),
            std::string::npos)
      << validate_trace(t);
  t.events[2].time_ns = 500;
  EXPECT_EQ(validate_trace(t), "");
}

}  // namespace
}  // namespace stalloc
