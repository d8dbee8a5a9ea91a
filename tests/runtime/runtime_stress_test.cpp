// The runtime under many threads, streams, plan installs and plan switches at once
// (runtime_stress_workload.h). Sized for a few seconds in CI; STALLOC_STRESS_SCALE=N multiplies
// the operations and iterations by N for a longer soak.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/runtime/runtime_stress_workload.h"

namespace stalloc {
namespace {

using namespace testing_support;

int scale() {
  const char* text = std::getenv("STALLOC_STRESS_SCALE");
  if (text == nullptr) return 1;
  const int n = std::atoi(text);
  return n > 0 ? n : 1;
}

TEST(RuntimeStress, ManyThreadsStreamsAndPlanSwitchesKeepEveryPattern) {
  StressShape shape;
  shape.random_threads = 8;
  shape.ops_per_thread = 4000 * scale();
  shape.streams_per_thread = 3;
  shape.trainer_iterations = 40 * scale();
  const StressOutcome r = run_runtime_stress(shape);
  std::printf("[ stress   ] %d random threads x %d streams, %llu operations, %d trainer iterations, "
              "%llu add_plan, %llu plan installs (%llu after the contention), %llu matches, %llu misses, %llu conflicts, "
              "%llu failed mallocs\n",
              shape.random_threads, shape.streams_per_thread,
              static_cast<unsigned long long>(r.operations), shape.trainer_iterations,
              static_cast<unsigned long long>(r.plan_adds),
              static_cast<unsigned long long>(r.stats.plan_installs),
              static_cast<unsigned long long>(r.quiet_installs),
              static_cast<unsigned long long>(r.stats.matches),
              static_cast<unsigned long long>(r.stats.misses),
              static_cast<unsigned long long>(r.stats.conflicts),
              static_cast<unsigned long long>(r.failed_mallocs));
  EXPECT_EQ(r.corrupted, 0u);
  EXPECT_EQ(r.failed_mallocs, 0u);
  EXPECT_EQ(r.plan_add_failures, 0u);
  EXPECT_GT(r.plan_adds, 0u);
  EXPECT_GE(r.contended_installs, r.plan_adds);
  EXPECT_GE(r.quiet_installs, 1u);  // iteration C's plan, made in the background
  EXPECT_GT(r.stats.matches, 0u);
  EXPECT_EQ(r.stats.invalid_frees, 0u);
  EXPECT_EQ(r.stats.allocations, r.stats.frees);
  EXPECT_EQ(r.stats.allocated_bytes, 0u);
  EXPECT_EQ(r.after_destroy.live_chunks, 0u);
  EXPECT_EQ(r.after_destroy.live_reservations, 0u);
  EXPECT_EQ(r.after_destroy.live_mappings, 0u);
  EXPECT_EQ(r.stats.driver.unguarded_uses, 0u);
  EXPECT_EQ(r.after_destroy.unguarded_uses, 0u);  // under STALLOC_TEST_GPU_LAG (CI)
}

}  // namespace
}  // namespace stalloc
