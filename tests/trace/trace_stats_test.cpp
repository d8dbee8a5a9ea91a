#include "trace/trace_stats.h"

#include <gtest/gtest.h>

#include "trace/trace_builder.h"

namespace stalloc {
namespace {

constexpr std::uint64_t kBig = 4 * MiB;

// Iteration i: a kBig tensor, a 1 KiB tensor, and one whose size is `third(i)`.
Trace iterations(int count, std::uint64_t (*third)(int)) {
  TraceBuilder b;
  b.alloc(8 * MiB);  // persistent weights
  for (int i = 0; i < count; ++i) {
    b.set_iteration(static_cast<std::uint32_t>(i));
    std::uint64_t x = b.alloc(kBig);
    std::uint64_t y = b.alloc(KiB, 1);
    std::uint64_t z = b.alloc(third(i));
    b.free(y);
    b.free(x);
    b.free(z);
  }
  return b.trace();
}

TEST(TraceStats, PeriodicTraceCountsAndShares) {
  Trace t = iterations(4, [](int) { return 3 * MiB; });
  TraceStats s = compute_trace_stats(t);
  EXPECT_EQ(s.events, 25u);
  EXPECT_EQ(s.allocations, 13u);
  EXPECT_EQ(s.frees, 12u);
  EXPECT_EQ(s.persistent, 1u);
  EXPECT_EQ(s.iterations, 4u);
  EXPECT_EQ(s.streams, 2u);
  // Iteration 0 carries the weights, so it differs from the three that follow.
  EXPECT_TRUE(s.periodic);
  EXPECT_EQ(s.iteration_signatures, 2u);
  EXPECT_EQ(s.lower_bound_bytes, 8 * MiB + kBig + KiB + 3 * MiB);
  EXPECT_EQ(s.lower_bound_event, 3u);
  EXPECT_EQ(s.lower_bound_iteration, 0u);
  EXPECT_EQ(s.distinct_sizes, 4u);
  EXPECT_EQ(s.persistent_bytes, 8 * MiB);
  EXPECT_EQ(s.small_bytes, 4 * KiB);
  EXPECT_EQ(s.dynamic_bytes, 0u);
  EXPECT_EQ(s.static_bytes, 4 * (kBig + 3 * MiB));
  EXPECT_EQ(s.total_bytes, s.persistent_bytes + s.small_bytes + s.dynamic_bytes + s.static_bytes);
  ASSERT_EQ(s.size_histogram.size(), 4u);
  EXPECT_EQ(s.size_histogram[0].min_bytes, KiB);
  EXPECT_EQ(s.size_histogram[0].count, 4u);
  EXPECT_EQ(s.size_histogram[1].min_bytes, 2 * MiB);  // 3 MiB falls in [2, 4) MiB
  EXPECT_EQ(s.size_histogram[1].bytes, 12 * MiB);
  EXPECT_EQ(s.size_histogram[3].min_bytes, 8 * MiB);
  EXPECT_EQ(s.problem, "");
}

TEST(TraceStats, SizeChangingAtAnOrdinalIsDynamic) {
  Trace t = iterations(4, [](int i) { return static_cast<std::uint64_t>(3 + i) * MiB; });
  TraceStats s = compute_trace_stats(t);
  EXPECT_FALSE(s.periodic);
  EXPECT_EQ(s.iteration_signatures, 4u);
  // Iteration 0 is not compared (it holds the weights); iterations 1..3 vary at ordinal 2.
  EXPECT_EQ(s.dynamic_bytes, (4 + 5 + 6) * MiB);
  EXPECT_EQ(s.static_bytes, 4 * kBig + 3 * MiB);
}

TEST(TraceStats, SmallThresholdAndHintAreOptions) {
  Trace t = iterations(3, [](int) { return 3 * MiB; });
  t.events[2].dynamic = true;  // iteration 0's 1 KiB tensor
  TraceStatsOptions o;
  o.small_threshold = 512;
  TraceStats s = compute_trace_stats(t, o);
  EXPECT_TRUE(s.periodic);
  EXPECT_EQ(s.small_bytes, 0u);
  EXPECT_EQ(s.dynamic_bytes, KiB);
  EXPECT_EQ(s.small_threshold, 512u);
}

TEST(TraceStats, PeriodicNeedsTwoIterationsAfterTheFirst) {
  EXPECT_FALSE(compute_trace_stats(iterations(2, [](int) { return 3 * MiB; })).periodic);
}

TEST(TraceStats, MalformedTraceIsDescribedNotRejected) {
  TraceBuilder b;
  Event stray;  // a free of an allocation never made (the builder refuses to write one)
  stray.kind = EventKind::Free;
  stray.id = 42;
  stray.size = 10;
  b.trace().events.push_back(stray);
  b.alloc(100);
  TraceStats s = compute_trace_stats(b.trace());
  EXPECT_NE(s.problem.find("not live"), std::string::npos);
  EXPECT_EQ(s.lower_bound_bytes, 100u);
  EXPECT_EQ(s.lower_bound_event, 1u);
}

TEST(TraceStats, EmptyTrace) {
  TraceStats s = compute_trace_stats(Trace{});
  EXPECT_EQ(s.events, 0u);
  EXPECT_EQ(s.iterations, 0u);
  EXPECT_FALSE(s.periodic);
  EXPECT_TRUE(s.size_histogram.empty());
}

}  // namespace
}  // namespace stalloc
