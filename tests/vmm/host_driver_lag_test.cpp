// The lagging host driver (HostDriverOptions::lag): recorded events stay pending for a number of
// queries, so the runtime's paths for GPU work still in flight run on a CPU. The rules are in
// host_driver.h; every test here counts answers by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/vmm/vmm_test_support.h"
#include "vmm/host_driver.h"

namespace stalloc::vmm {
namespace {

std::unique_ptr<Driver> lagging(std::uint32_t queries, std::uint64_t seed = 0,
                                bool backed = false) {
  HostDriverOptions options;
  options.granularity = testing::kHostTestGranularity;
  options.backed = backed;
  options.lag.queries = queries;
  options.lag.seed = seed;
  return make_host_driver(options);
}

EventHandle new_event(Driver& driver) {
  EventHandle event = 0;
  EXPECT_EQ(driver.event_create(&event), Status::Success);
  return event;
}

// Queries until Success (at most `limit` times); returns the NotReady answers before it.
int not_ready_answers(Driver& driver, EventHandle event, int limit = 1000) {
  for (int n = 0; n < limit; ++n) {
    const Status s = driver.event_query(event);
    if (s == Status::Success) return n;
    EXPECT_EQ(s, Status::NotReady);
  }
  ADD_FAILURE() << "event " << event << " never completed";
  return limit;
}

TEST(LaggingHostDriver, ARecordedEventAnswersNotReadyNTimesThenSuccess) {
  for (const bool backed : {false, true}) {
    auto driver = lagging(3, 0, backed);
    const EventHandle event = new_event(*driver);
    ASSERT_EQ(driver->event_record(event, 7), Status::Success);
    EXPECT_EQ(driver->event_query(event), Status::NotReady);
    EXPECT_EQ(driver->event_query(event), Status::NotReady);
    EXPECT_EQ(driver->event_query(event), Status::NotReady);
    EXPECT_EQ(driver->event_query(event), Status::Success);
    EXPECT_EQ(driver->event_query(event), Status::Success) << "complete stays complete";
    EXPECT_EQ(driver->counters().event_queries, 5u);
  }
}

TEST(LaggingHostDriver, AnEventNeverRecordedIsComplete) {
  auto driver = lagging(5);
  const EventHandle event = new_event(*driver);
  EXPECT_EQ(driver->event_query(event), Status::Success);
  EXPECT_EQ(driver->stream_wait_event(1, event), Status::Success);
  EXPECT_EQ(driver->event_query(event), Status::Success);
  EXPECT_EQ(driver->event_query(12345), Status::InvalidHandle);
}

TEST(LaggingHostDriver, ReRecordingStartsTheCountOver) {
  auto driver = lagging(3);
  const EventHandle event = new_event(*driver);
  ASSERT_EQ(driver->event_record(event, 0), Status::Success);
  EXPECT_EQ(driver->event_query(event), Status::NotReady);
  EXPECT_EQ(driver->event_query(event), Status::NotReady);
  ASSERT_EQ(driver->event_record(event, 0), Status::Success);
  EXPECT_EQ(not_ready_answers(*driver, event), 3);
  ASSERT_EQ(driver->event_record(event, 1), Status::Success) << "complete, then recorded again";
  EXPECT_EQ(not_ready_answers(*driver, event), 3);
}

TEST(LaggingHostDriver, WaitingForAnEventNeitherCountsNorCompletesIt) {
  auto driver = lagging(2);
  const EventHandle event = new_event(*driver);
  ASSERT_EQ(driver->event_record(event, 1), Status::Success);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(driver->stream_wait_event(2, event), Status::Success);
  EXPECT_EQ(not_ready_answers(*driver, event), 2);
  EXPECT_EQ(driver->counters().stream_waits, 5u);
}

TEST(LaggingHostDriver, WithoutLagEveryRecordIsCompleteAtOnce) {
  auto driver = lagging(0, 99);
  const EventHandle event = new_event(*driver);
  ASSERT_EQ(driver->event_record(event, 3), Status::Success);
  EXPECT_EQ(driver->event_query(event), Status::Success);
}

// Each record draws its count from [0, N]; the same seed draws the same counts.
std::vector<int> seeded_counts(std::uint64_t seed) {
  constexpr std::uint32_t kN = 6;
  auto driver = lagging(kN, seed);
  std::vector<EventHandle> events;
  for (int i = 0; i < 64; ++i) {
    events.push_back(new_event(*driver));
    // A stream each, so no record waits for another.
    EXPECT_EQ(driver->event_record(events.back(), static_cast<StreamHandle>(100 + i)),
              Status::Success);
  }
  std::vector<int> counts;
  for (const EventHandle e : events) counts.push_back(not_ready_answers(*driver, e));
  return counts;
}

TEST(LaggingHostDriver, ASeedDrawsEachRecordsCountReproduciblyFromZeroToN) {
  const std::vector<int> first = seeded_counts(42);
  EXPECT_EQ(seeded_counts(42), first) << "same seed, same counts";
  EXPECT_NE(seeded_counts(43), first) << "another seed, other counts";
  const std::set<int> seen(first.begin(), first.end());
  EXPECT_EQ(*seen.begin(), 0) << "0 can be drawn: complete at once";
  EXPECT_EQ(*seen.rbegin(), 6) << "N can be drawn";
  EXPECT_GE(seen.size(), 5u) << "64 draws from 7 values";
}

// Completion follows stream order: a record is complete only after those made before it on its
// stream, and those its stream was made to wait for, whichever was queried.
TEST(LaggingHostDriver, ALaterRecordCompletesOnlyAfterTheOnesBeforeIt) {
  // Seed 0: every record takes N, so order changes nothing: N answers each.
  auto plain = lagging(4);
  const EventHandle a = new_event(*plain);
  const EventHandle b = new_event(*plain);
  ASSERT_EQ(plain->event_record(a, 1), Status::Success);
  ASSERT_EQ(plain->stream_wait_event(2, a), Status::Success);
  ASSERT_EQ(plain->event_record(b, 2), Status::Success);
  EXPECT_EQ(not_ready_answers(*plain, b), 4);
  EXPECT_EQ(plain->event_query(a), Status::Success) << "counted by b's queries";

  // Seeded: find draws where the later record's count is smaller than the earlier one's.
  constexpr std::uint32_t kN = 50;
  int ordered = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    for (const bool same_stream : {true, false}) {
      auto driver = lagging(kN, seed);
      const EventHandle first = new_event(*driver);
      const EventHandle later = new_event(*driver);
      ASSERT_EQ(driver->event_record(first, 1), Status::Success);
      if (!same_stream) {
        ASSERT_EQ(driver->stream_wait_event(2, first), Status::Success);
      }
      ASSERT_EQ(driver->event_record(later, same_stream ? 1 : 2), Status::Success);
      // The same seed draws the same two counts alone (each on its own stream).
      auto apart = lagging(kN, seed);
      const EventHandle x = new_event(*apart);
      const EventHandle y = new_event(*apart);
      ASSERT_EQ(apart->event_record(x, 1), Status::Success);
      ASSERT_EQ(apart->event_record(y, 2), Status::Success);
      const int later_alone = not_ready_answers(*apart, y);
      const int first_alone = not_ready_answers(*apart, x);
      const int answers = not_ready_answers(*driver, later);
      EXPECT_EQ(answers, std::max(first_alone, later_alone)) << "seed " << seed;
      EXPECT_EQ(driver->event_query(first), Status::Success) << "seed " << seed;
      if (first_alone > later_alone) ++ordered;
    }
  }
  EXPECT_GT(ordered, 4) << "some seeds should draw a later count below an earlier one";
}

// Streams with no wait between them are independent: a later record on one stream may complete
// while an earlier one on another is pending, as on a GPU.
TEST(LaggingHostDriver, UnrelatedStreamsCompleteIndependently) {
  auto driver = lagging(3);
  const EventHandle a = new_event(*driver);
  const EventHandle b = new_event(*driver);
  ASSERT_EQ(driver->event_record(a, 1), Status::Success);
  ASSERT_EQ(driver->event_record(b, 2), Status::Success);
  EXPECT_EQ(not_ready_answers(*driver, b), 3);
  EXPECT_EQ(driver->event_query(a), Status::NotReady) << "b's queries did not count a";
  EXPECT_EQ(not_ready_answers(*driver, a), 2);
}

// A random program of records, waits and queries over a few streams and events, with a seeded
// lag: whenever an event answers Success, every record it depends on (by stream order and waits,
// transitively) answers Success too.
TEST(LaggingHostDriver, CompletionIsAlwaysClosedUnderStreamOrderAndWaits) {
  constexpr int kStreams = 4;
  constexpr int kEvents = 6;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    auto driver = lagging(5, seed);
    std::vector<EventHandle> events;
    for (int i = 0; i < kEvents; ++i) events.push_back(new_event(*driver));
    // The model: each record's ancestors; per event its current record, per stream its last
    // record and the records it was made to wait for since.
    std::vector<std::set<int>> ancestors;
    std::vector<int> current(kEvents, -1);
    std::vector<int> last(kStreams, -1);
    std::vector<std::set<int>> waited(kStreams);
    std::mt19937 rng(static_cast<std::uint32_t>(seed));
    auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
    int successes_checked = 0;
    for (int step = 0; step < 600; ++step) {
      const int op = pick(3);
      const int e = pick(kEvents);
      const int s = pick(kStreams);
      if (op == 0) {
        ASSERT_EQ(driver->event_record(events[e], static_cast<StreamHandle>(s)), Status::Success);
        std::set<int> before = waited[s];
        if (last[s] >= 0) before.insert(last[s]);
        std::set<int> all = before;
        for (const int r : before) all.insert(ancestors[r].begin(), ancestors[r].end());
        ancestors.push_back(all);
        current[e] = last[s] = static_cast<int>(ancestors.size()) - 1;
        waited[s].clear();
      } else if (op == 1) {
        ASSERT_EQ(driver->stream_wait_event(static_cast<StreamHandle>(s), events[e]),
                  Status::Success);
        if (current[e] >= 0) waited[s].insert(current[e]);
      } else if (driver->event_query(events[e]) == Status::Success && current[e] >= 0) {
        ++successes_checked;
        for (int other = 0; other < kEvents; ++other) {
          if (current[other] >= 0 && ancestors[current[e]].contains(current[other])) {
            EXPECT_EQ(driver->event_query(events[other]), Status::Success)
                << "seed " << seed << " step " << step << ": event " << e
                << " complete before an earlier record of event " << other;
          }
        }
      }
    }
    EXPECT_GT(successes_checked, 20) << "seed " << seed;
  }
}

// Records never queried pile up; past HostLag::kMaxPendingRecords on one stream the oldest
// completes, and with it everything recorded before it.
// A synchronisation completes every record of every stream, those waiting for others included,
// and later records lag again.
TEST(LaggingHostDriver, SynchronizeCompletesEveryRecordAndLaterOnesLagAgain) {
  auto driver = lagging(1000);
  const EventHandle a = new_event(*driver);
  const EventHandle b = new_event(*driver);
  ASSERT_EQ(driver->event_record(a, 1), Status::Success);
  ASSERT_EQ(driver->stream_wait_event(2, a), Status::Success);
  ASSERT_EQ(driver->event_record(b, 2), Status::Success);
  EXPECT_EQ(driver->event_query(b), Status::NotReady);
  ASSERT_EQ(driver->synchronize(), Status::Success);
  EXPECT_EQ(driver->event_query(a), Status::Success);
  EXPECT_EQ(driver->event_query(b), Status::Success);
  ASSERT_EQ(driver->event_record(a, 1), Status::Success);
  EXPECT_EQ(driver->event_query(a), Status::NotReady);
  EXPECT_EQ(driver->counters().synchronizes, 1u);
}

TEST(LaggingHostDriver, AStreamHoldsAtMostMaxPendingRecords) {
  auto driver = lagging(1000);
  const EventHandle oldest = new_event(*driver);
  const EventHandle elsewhere = new_event(*driver);
  const EventHandle repeated = new_event(*driver);
  ASSERT_EQ(driver->event_record(elsewhere, 2), Status::Success);
  ASSERT_EQ(driver->event_record(oldest, 1), Status::Success);
  for (std::size_t i = 0; i < HostLag::kMaxPendingRecords - 1; ++i) {
    ASSERT_EQ(driver->event_record(repeated, 1), Status::Success);
  }
  EXPECT_EQ(driver->event_query(elsewhere), Status::NotReady) << "below the limit";
  EXPECT_EQ(driver->event_query(oldest), Status::NotReady) << "exactly at the limit";
  ASSERT_EQ(driver->event_record(repeated, 1), Status::Success);
  EXPECT_EQ(driver->event_query(oldest), Status::Success);
  EXPECT_EQ(driver->event_query(elsewhere), Status::Success) << "recorded before the oldest";
  EXPECT_EQ(driver->event_query(repeated), Status::NotReady);
}

}  // namespace
// gpu_use: a kernel enqueued on a stream. Memory unmapped, or used by another stream, before
// that kernel is known done (an event recorded after it completed, or a wait for one) is what a
// GPU shows as a fault or a race; the lagging driver counts it.
struct UseFixture {
  std::unique_ptr<Driver> driver = lagging(2);
  std::size_t g = testing::kHostTestGranularity;
  ChunkHandle chunk = 0;
  DevicePtr first = 0;   // the chunk mapped here
  DevicePtr second = 0;  // and, when `alias`, here too
  explicit UseFixture(bool alias = false) {
    EXPECT_EQ(driver->create(&chunk, g), Status::Success);
    EXPECT_EQ(driver->reserve(&first, 2 * g), Status::Success);
    EXPECT_EQ(driver->map(first, g, 0, chunk), Status::Success);
    if (alias) {
      second = first + g;
      EXPECT_EQ(driver->map(second, g, 0, chunk), Status::Success);
    }
  }
  std::uint64_t unguarded() const { return driver->counters().unguarded_uses; }
  void complete(EventHandle event) { not_ready_answers(*driver, event); }
};

TEST(LaggingHostDriverUses, AnUnmapBeforeTheKernelIsKnownDoneIsCounted) {
  UseFixture f;
  ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
  EXPECT_EQ(f.driver->unmap(f.first, f.g), Status::Success);
  EXPECT_EQ(f.unguarded(), 1u);
}

TEST(LaggingHostDriverUses, AnUnmapAfterAnEventRecordedAfterTheKernelCompletedIsNot) {
  UseFixture f;
  ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
  const EventHandle event = new_event(*f.driver);
  ASSERT_EQ(f.driver->event_record(event, 1), Status::Success);
  EXPECT_EQ(f.driver->event_query(event), Status::NotReady);
  f.complete(event);
  EXPECT_EQ(f.driver->unmap(f.first, f.g), Status::Success);
  EXPECT_EQ(f.unguarded(), 0u);
}

TEST(LaggingHostDriverUses, AnUnmapAfterASynchronizeIsNot) {
  UseFixture f;
  ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
  ASSERT_EQ(f.driver->synchronize(), Status::Success);
  EXPECT_EQ(f.driver->unmap(f.first, f.g), Status::Success);
  EXPECT_EQ(f.unguarded(), 0u);
}

// Uses of touching bytes through one view with no record between them are one use: a planned
// iteration that queries nothing does not pile them up, and each check counts them once.
TEST(LaggingHostDriverUses, TouchingUsesWithNoRecordBetweenAreOne) {
  UseFixture f;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(f.driver->gpu_use(1, f.first + (i % 2) * 64, 100), Status::Success);
  }
  ASSERT_EQ(f.driver->gpu_use(2, f.first + 150, 10), Status::Success);  // inside the union
  EXPECT_EQ(f.unguarded(), 1u);
  ASSERT_EQ(f.driver->gpu_use(2, f.first + 4096, 10), Status::Success);  // beyond it
  EXPECT_EQ(f.unguarded(), 1u);
  EXPECT_EQ(f.driver->unmap(f.first, f.g), Status::Success);
  EXPECT_EQ(f.unguarded(), 4u);  // + the union on stream 1 and the two uses on stream 2
}

TEST(LaggingHostDriverUses, AnEventRecordedBeforeTheKernelDoesNotCoverIt) {
  UseFixture f;
  const EventHandle event = new_event(*f.driver);
  ASSERT_EQ(f.driver->event_record(event, 1), Status::Success);
  ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
  f.complete(event);
  EXPECT_EQ(f.driver->unmap(f.first, f.g), Status::Success);
  EXPECT_EQ(f.unguarded(), 1u);
}

TEST(LaggingHostDriverUses, AnotherStreamMustWaitForTheKernel) {
  for (const bool waits : {false, true}) {
    UseFixture f;
    ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
    const EventHandle event = new_event(*f.driver);
    ASSERT_EQ(f.driver->event_record(event, 1), Status::Success);
    if (waits) {
      ASSERT_EQ(f.driver->stream_wait_event(2, event), Status::Success);
    }
    ASSERT_EQ(f.driver->gpu_use(2, f.first + 50, 100), Status::Success);
    EXPECT_EQ(f.unguarded(), waits ? 0u : 1u) << "waits " << waits;
    // Bytes not shared are no race.
    ASSERT_EQ(f.driver->gpu_use(3, f.first + 200, 100), Status::Success);
    EXPECT_EQ(f.unguarded(), waits ? 0u : 1u) << "waits " << waits;
    // Stream 1 going on over stream 2's bytes never waited for stream 2: a race.
    ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
    EXPECT_EQ(f.unguarded(), waits ? 1u : 2u) << "waits " << waits;
  }
}

TEST(LaggingHostDriverUses, AStreamsOwnWorkIsOrderedByTheStream) {
  UseFixture f;
  ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
  ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
  EXPECT_EQ(f.unguarded(), 0u);
}

TEST(LaggingHostDriverUses, WaitsAreTransitive) {
  UseFixture f;
  ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
  const EventHandle on1 = new_event(*f.driver);
  const EventHandle on2 = new_event(*f.driver);
  ASSERT_EQ(f.driver->event_record(on1, 1), Status::Success);
  ASSERT_EQ(f.driver->stream_wait_event(2, on1), Status::Success);
  ASSERT_EQ(f.driver->event_record(on2, 2), Status::Success);
  ASSERT_EQ(f.driver->stream_wait_event(3, on2), Status::Success);
  ASSERT_EQ(f.driver->gpu_use(3, f.first, 100), Status::Success);
  EXPECT_EQ(f.unguarded(), 0u);
}

TEST(LaggingHostDriverUses, AliasesShareTheChunksBytesNotTheirAddresses) {
  UseFixture f(/*alias=*/true);
  ASSERT_EQ(f.driver->gpu_use(1, f.first, 100), Status::Success);
  // The other view's addresses may go; its bytes are the same chunk's.
  EXPECT_EQ(f.driver->unmap(f.second, f.g), Status::Success);
  EXPECT_EQ(f.unguarded(), 0u);
  ASSERT_EQ(f.driver->map(f.second, f.g, 0, f.chunk), Status::Success);
  ASSERT_EQ(f.driver->gpu_use(2, f.second + 10, 10), Status::Success);
  EXPECT_EQ(f.unguarded(), 1u);
}

TEST(LaggingHostDriverUses, AUseOfBytesNotMappedIsRefused) {
  UseFixture f;
  EXPECT_EQ(f.driver->gpu_use(1, f.first + f.g - 10, 20), Status::InvalidValue);
  EXPECT_EQ(f.driver->gpu_use(1, f.first, f.g), Status::Success);
}

TEST(HostDriverUses, WithoutLagEverythingIsDoneAtOnce) {
  HostDriverOptions options;
  options.granularity = testing::kHostTestGranularity;
  options.backed = false;
  auto driver = make_host_driver(options);
  ChunkHandle chunk = 0;
  DevicePtr va = 0;
  ASSERT_EQ(driver->create(&chunk, options.granularity), Status::Success);
  ASSERT_EQ(driver->reserve(&va, options.granularity), Status::Success);
  ASSERT_EQ(driver->map(va, options.granularity, 0, chunk), Status::Success);
  ASSERT_EQ(driver->gpu_use(1, va, 100), Status::Success);
  ASSERT_EQ(driver->gpu_use(2, va, 100), Status::Success);
  EXPECT_EQ(driver->unmap(va, options.granularity), Status::Success);
  EXPECT_EQ(driver->counters().unguarded_uses, 0u);
}

}  // namespace stalloc::vmm
