#include <gtest/gtest.h>

#include "src/trace_replayer.h"
#include "vmm/fault_injecting_driver.h"
#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

constexpr vmm::StreamHandle kCompute = 0x1000;
constexpr vmm::StreamHandle kComm = 0x2000;

// Unplanned memory freed on one stream goes to another only once its events say the GPU is
// done with it: until then the other stream gets other chunks or, at the capacity, nothing;
// neither stream ever waits for the other.
TEST(RuntimeStreams, UnplannedMemoryChangesStreamOnlyAfterTheGpuIsDone) {
  auto host = host_driver();
  vmm::FaultInjectingDriver driver(*host);
  Runtime rt(test_config("capacity:" + std::to_string(4 * kG)), driver);
  driver.hold_events(true);
  void* a = rt.malloc(2 * kG, 0, kCompute);
  rt.free(a, 2 * kG, 0, kCompute);
  void* b = rt.malloc(2 * kG, 0, kComm);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(rt.stats().reserved_bytes, 4 * kG);
  rt.free(b, 2 * kG, 0, kComm);
  EXPECT_EQ(rt.malloc(4 * kG, 0, kComm), nullptr);
  driver.hold_events(false);
  const auto creates = driver.counters().creates;
  void* c = rt.malloc(4 * kG, 0, kComm);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(driver.counters().creates, creates);
  EXPECT_EQ(rt.stats().reserved_bytes, 4 * kG);
  EXPECT_EQ(rt.stats().stream_waits, 0u);
  rt.free(c, 4 * kG, 0, kComm);
}

TEST(RuntimeStreams, SameStreamReuseNeedsNoWait) {
  auto driver = host_driver();
  Runtime rt(test_config(""), *driver);
  for (int i = 0; i < 3; ++i) {
    void* a = rt.malloc(2 * kG, 0, kCompute);
    void* s = rt.malloc(300, 0, kCompute);
    rt.free(a, 2 * kG, 0, kCompute);
    rt.free(s, 300, 0, kCompute);
  }
  EXPECT_EQ(driver->counters().stream_waits, 0u);
}

TEST(RuntimeStreams, RecordStreamExtendsTheUse) {
  auto driver = host_driver();
  Runtime rt(test_config(""), *driver);
  void* a = rt.malloc(2 * kG, 0, kCompute);
  rt.record_stream(a, kComm);
  rt.free(a, 2 * kG, 0, kCompute);
  void* b = rt.malloc(2 * kG, 0, kCompute);
  EXPECT_EQ(driver->counters().stream_waits, 1u);
  rt.free(b, 2 * kG, 0, kCompute);

  // A small request's bytes are reused the same way.
  void* s = rt.malloc(1000, 0, kCompute);
  rt.record_stream(s, kComm);
  rt.free(s, 1000, 0, kCompute);
  void* t = rt.malloc(1000, 0, kCompute);
  EXPECT_EQ(t, s);
  EXPECT_EQ(driver->counters().stream_waits, 2u);
  rt.free(t, 1000, 0, kCompute);
}

// Packed memory freed after a record_stream on a stream that frees rarely: the free marks that
// stream, and the reuse waits on that mark rather than on an event recorded at the reuse.
TEST(RuntimeStreams, APackedReuseWaitsOnTheMarkOfTheRecordedStream) {
  auto driver = host_driver();
  Runtime rt(test_config(""), *driver);
  void* a = rt.malloc(2 * kG, 0, kCompute);
  rt.record_stream(a, kComm);
  rt.free(a, 2 * kG, 0, kCompute);
  const std::uint64_t records = driver->counters().event_records;
  void* b = rt.malloc(2 * kG, 0, kCompute);
  EXPECT_EQ(b, a);
  EXPECT_EQ(rt.stats().stream_waits, 1u);
  EXPECT_EQ(rt.stats().stream_waits_on_marks, 1u);
  EXPECT_EQ(driver->counters().event_records, records);  // nothing recorded at the reuse
  rt.free(b, 2 * kG, 0, kCompute);
}

// In a plan, a chunk used by a slot on stream 0 and then by a slot on stream 1 makes the second
// wait for the first, every iteration, with no VMM call.
TEST(RuntimeStreams, PlannedChunkChangingStreamIsOrdered) {
  auto run = [](std::uint32_t second_stream) {
    ThreadedTraceBuilder b;
    for (int i = 0; i < 5; ++i) {
      b.free(b.alloc(2 * kG, 0));
      b.free(b.alloc(2 * kG, second_stream));
      b.next_iteration();
    }
    auto driver = host_driver();
    Runtime rt(test_config("profile_iterations:1"), *driver);
    ReplayResult r = replay_trace(rt, b.trace(), {});
    EXPECT_EQ(r.iterations[3].matches, 2u);
    EXPECT_EQ(r.iterations[3].vmm_calls, 0u);
    return driver->counters().stream_waits;
  };
  EXPECT_EQ(run(0), 0u);
  // Steady iterations 2..4: stream 0 -> 1 inside each, and 1 -> 0 across the boundaries
  // between them (iteration 1 was served from the packed arenas).
  EXPECT_GE(run(1), 5u);
}

// A planned chunk freed on stream 0 and taken by a slot on stream 1 after stream 0 has freed
// more (StreamSync::kFreesPerMark of them) waits on the free mark made since, not on an event
// recorded at the reuse that would cover stream 0's later work too; under lag (CI) every use of
// the chunk on stream 1 is still ordered after stream 0's (unguarded_uses, Driver::gpu_use).
TEST(RuntimeStreams, APlannedReuseOnAnotherStreamWaitsOnAFreeMark) {
  ThreadedTraceBuilder b;
  for (int i = 0; i < 5; ++i) {
    b.free(b.alloc(4 * kG, 0));
    for (std::uint64_t k = 0; k <= StreamSync::kFreesPerMark; ++k) b.free(b.alloc(300, 0));
    b.free(b.alloc(4 * kG, 1));
    b.next_iteration();
  }
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  const ReplayResult r = replay_trace(rt, b.trace(), {});
  EXPECT_EQ(r.failed_allocations, 0u);
  EXPECT_GT(r.iterations[3].matches, 0u);
  const RuntimeStats s = rt.stats();
  EXPECT_GT(s.stream_waits_on_marks, 0u);
  EXPECT_LE(s.stream_waits_on_marks, s.stream_waits);
  EXPECT_EQ(driver->counters().unguarded_uses, 0u);
}

}  // namespace
}  // namespace stalloc
