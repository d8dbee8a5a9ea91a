// The stress workload (runtime_stress_workload.h) small enough for ThreadSanitizer: every kind
// of concurrent call - malloc, free, record_stream on several streams, step, add_plan,
// background planning, stats, empty_cache - overlaps at least a few times.
#include <gtest/gtest.h>

#include "tests/runtime/runtime_stress_workload.h"

namespace stalloc {
namespace {

using namespace testing_support;

TEST(RuntimeStressConcurrent, SmallStressKeepsPatternsAndReleasesEverything) {
  StressShape shape;
  shape.random_threads = 3;
  shape.ops_per_thread = 300;
  shape.streams_per_thread = 2;
  shape.trainer_iterations = 6;
  const StressOutcome r = run_runtime_stress(shape);
  EXPECT_EQ(r.corrupted, 0u);
  EXPECT_EQ(r.failed_mallocs, 0u);
  EXPECT_EQ(r.plan_add_failures, 0u);
  EXPECT_EQ(r.stats.invalid_frees, 0u);
  EXPECT_EQ(r.stats.allocations, r.stats.frees);
  EXPECT_EQ(r.stats.allocated_bytes, 0u);
  EXPECT_EQ(r.after_destroy.live_chunks, 0u);
  EXPECT_EQ(r.after_destroy.live_reservations, 0u);
  EXPECT_EQ(r.after_destroy.live_mappings, 0u);
  EXPECT_EQ(r.after_destroy.unguarded_uses, 0u);  // under STALLOC_TEST_GPU_LAG (CI)
}

}  // namespace
}  // namespace stalloc
