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

}  // namespace
}  // namespace stalloc
