// 0-byte allocations (torch.empty(0), an MoE expert that got no tokens, nonzero() with no hits)
// must not stop planning: the planner made a Static slot of size 0, the installer refused the
// plan ("plan slot 1: size 0"), and that iteration signature was never planned again.
#include <gtest/gtest.h>

#include <set>

#include "src/trace_replayer.h"
#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

// Four allocations per iteration, the second of 0 bytes, and a second 0-byte tensor live at the
// same time as the first (their pointers must differ: PyTorch's pluggable allocator keys its
// books by pointer).
Trace zero_byte_trace(int iterations, bool varying = false) {
  ThreadedTraceBuilder b;
  for (int it = 0; it < iterations; ++it) {
    const std::uint64_t a = b.alloc(5 * kG + 100);
    // varying: an expert buffer that is empty in every other iteration.
    const std::uint64_t z = b.alloc(varying && it % 2 == 1 ? 3 * kG : 0);
    const std::uint64_t c = b.alloc(3 * kG);
    const std::uint64_t z2 = b.alloc(0);
    const std::uint64_t d = b.alloc(1000);
    b.free(z);
    b.free(a);
    b.free(z2);
    b.free(d);
    b.free(c);
    b.next_iteration();
  }
  return b.trace();
}

void expect_planned_and_matched(const Trace& trace, std::uint64_t allocations_per_iteration,
                                const std::string& conf) {
  auto driver = host_driver();
  Runtime rt(test_config(conf), *driver);
  ReplayOptions options;
  options.verify = true;
  const ReplayResult r = replay_trace(rt, trace, options);
  const RuntimeStats s = rt.stats();
  EXPECT_EQ(r.failed_allocations, 0u);
  EXPECT_EQ(r.verify_errors, 0u);
  EXPECT_GE(s.plan_installs, 1u);
  EXPECT_EQ(s.plan_failures, 0u) << s.last_plan_error;
  EXPECT_EQ(s.last_plan_error, "");
  ASSERT_FALSE(r.iterations.empty());
  const IterationReport& last = r.iterations.back();
  EXPECT_EQ(last.matches, allocations_per_iteration);
  EXPECT_EQ(last.misses, 0u);
  EXPECT_EQ(last.conflicts, 0u);
  EXPECT_EQ(s.allocated_bytes, 0u);
}

TEST(RuntimeZeroBytes, AZeroByteAllocationPerIterationIsPlannedAndMatched) {
  expect_planned_and_matched(zero_byte_trace(6), 5, "");
}

TEST(RuntimeZeroBytes, WindowedPlansInstallToo) {
  expect_planned_and_matched(zero_byte_trace(6), 5, "mode:windowed");
}

TEST(RuntimeZeroBytes, AnOrdinalThatIsSometimesEmptyIsPlannedAndMatched) {
  expect_planned_and_matched(zero_byte_trace(8, /*varying=*/true), 5, "");
}

TEST(RuntimeZeroBytes, LiveZeroByteTensorsGetDistinctNonNullPointers) {
  auto driver = host_driver();
  Runtime rt(test_config(""), *driver);
  for (int it = 0; it < 4; ++it) {
    std::set<void*> live;
    std::vector<void*> zeros;
    void* big = rt.malloc(2 * kG, 0, 0);
    ASSERT_NE(big, nullptr);
    for (int i = 0; i < 3; ++i) {
      void* p = rt.malloc(0, 0, 0);
      ASSERT_NE(p, nullptr) << "iteration " << it;
      EXPECT_TRUE(live.insert(p).second) << "two live 0-byte tensors share " << p;
      zeros.push_back(p);
    }
    EXPECT_EQ(live.count(big), 0u);
    for (void* p : zeros) rt.free(p, 0, 0, 0);
    rt.free(big, 2 * kG, 0, 0);
    rt.step();
    rt.wait_for_planning();
  }
  const RuntimeStats s = rt.stats();
  EXPECT_EQ(s.invalid_frees, 0u);
  EXPECT_EQ(s.plan_failures, 0u) << s.last_plan_error;
  EXPECT_GE(s.plan_installs, 1u);
  EXPECT_EQ(s.allocated_bytes, 0u);
}

}  // namespace
}  // namespace stalloc
