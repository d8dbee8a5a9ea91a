#include "sim/time_estimate.h"

#include <gtest/gtest.h>

namespace stalloc {
namespace {

Event at(std::uint64_t id, std::uint32_t iteration, std::int64_t time_ns, EventKind kind = EventKind::Alloc) {
  Event e;
  e.kind = kind;
  e.id = id;
  e.size = 1 << 20;
  e.iteration = iteration;
  e.time_ns = time_ns;
  return e;
}

TEST(IterationTime, MedianSpanBetweenIterationStartsFromTimeStamps) {
  Trace t;
  // Iterations start at 0, 2 s, 3 s and 6 s: spans 2, 1, 3 s (the last iteration's own span is
  // not a whole iteration and is left out); median 2 s.
  t.events = {at(1, 0, 0), at(1, 0, 500'000'000, EventKind::Free), at(2, 1, 2'000'000'000),
              at(2, 1, 2'100'000'000, EventKind::Free), at(3, 2, 3'000'000'000),
              at(3, 2, 3'200'000'000, EventKind::Free), at(4, 3, 6'000'000'000),
              at(4, 3, 6'100'000'000, EventKind::Free)};
  const IterationTime it = iteration_time(t, *find_gpu_spec("a100"));
  EXPECT_DOUBLE_EQ(it.seconds, 2.0);
  EXPECT_EQ(it.source, "time stamps");
}

TEST(IterationTime, OneIterationIsTheWholeSpanAndUnstampedEventsAreIgnored) {
  Trace t;
  t.events = {at(1, 0, -1), at(2, 0, 1'000'000'000), at(2, 0, 1'750'000'000, EventKind::Free)};
  EXPECT_DOUBLE_EQ(iteration_time(t, *find_gpu_spec("a100")).seconds, 0.75);
}

TEST(IterationTime, FlopsModelWhenThereAreNoTimeStamps) {
  Trace t;
  t.events = {at(1, 0, -1)};
  t.meta["flops_per_iteration"] = "1.248e15";
  const IterationTime a100 = iteration_time(t, *find_gpu_spec("a100"));
  EXPECT_DOUBLE_EQ(a100.seconds, 1.248e15 / (312e12 * 0.40));  // 10 s
  EXPECT_EQ(a100.source, "FLOPs at 40% MFU");
  EXPECT_LT(iteration_time(t, *find_gpu_spec("h100")).seconds, a100.seconds);
  t.meta.clear();
  EXPECT_EQ(iteration_time(t, *find_gpu_spec("a100")).seconds, 0.0);
  EXPECT_EQ(iteration_time(t, *find_gpu_spec("a100")).source, "unknown");
}

// Three iterations of 1 s each: 10 maps (15 us), 10 creates (1930 us), 4 event queries (2 us).
Trace three_seconds() {
  Trace t;
  t.events = {at(1, 0, 0), at(2, 1, 1'000'000'000), at(3, 2, 2'000'000'000)};
  return t;
}

SimResult three_iterations() {
  SimResult r;
  r.iteration_calls.resize(3);
  r.iteration_calls[0][vmm::CallKind::Map] = 10;
  r.iteration_calls[1][vmm::CallKind::Create] = 10;
  r.iteration_calls[2][vmm::CallKind::EventQuery] = 4;
  return r;
}

TEST(EstimateTime, FirstIsTheCostliestWarmUpIterationAndSteadyTheLast) {
  const Trace t = three_seconds();
  SimResult r = three_iterations();
  const vmm::CostTable& a100 = *vmm::find_cost_table("a100");
  estimate_time(t, *find_gpu_spec("a100"), a100, &r);
  EXPECT_EQ(r.time.gpu, "a100");
  EXPECT_DOUBLE_EQ(r.time.iteration_seconds, 1.0);
  EXPECT_EQ(r.time.first_calls, r.iteration_calls[1]);
  EXPECT_DOUBLE_EQ(r.time.allocator_seconds_first, 1930e-6);
  EXPECT_DOUBLE_EQ(r.time.allocator_seconds_steady, 2e-6);
  EXPECT_DOUBLE_EQ(r.time.overhead_first, 1930e-6);
  EXPECT_DOUBLE_EQ(r.time.overhead_steady, 2e-6);
  ASSERT_EQ(r.time.allocator_seconds.size(), 3u);
  EXPECT_DOUBLE_EQ(r.time.allocator_seconds[0], 15e-6);
  EXPECT_DOUBLE_EQ(r.time.allocator_seconds[1], 1930e-6);
  EXPECT_DOUBLE_EQ(r.time.allocator_seconds[2], 2e-6);
}

TEST(EstimateTime, OneIterationIsBothFirstAndSteady) {
  Trace t;
  t.events = {at(1, 0, -1)};
  SimResult r;
  r.iteration_calls.resize(1);
  r.iteration_calls[0][vmm::CallKind::Unmap] = 2;
  estimate_time(t, *find_gpu_spec("a100"), *vmm::find_cost_table("a100"), &r);
  EXPECT_DOUBLE_EQ(r.time.allocator_seconds_first, 52e-6);
  EXPECT_DOUBLE_EQ(r.time.allocator_seconds_steady, 52e-6);
  EXPECT_EQ(r.time.overhead_first, 0.0);  // no iteration time: no share
}

// A run of N iterations: the simulated ones as they were, then the steady (last) one for each
// iteration after them; its share is of N iterations' time. By hand: 15 + 1930 + 2 us for the
// three simulated, 2 us for each of the 7 more of a 10-iteration run; a 2-iteration run is the
// first two alone.
TEST(EstimateTime, ARunIsTheSimulatedIterationsThenTheSteadyOneForTheRest) {
  const Trace t = three_seconds();
  SimResult r = three_iterations();
  const vmm::CostTable& a100 = *vmm::find_cost_table("a100");
  estimate_time(t, *find_gpu_spec("a100"), a100, &r, 10);
  EXPECT_EQ(r.time.run_iterations, 10u);
  EXPECT_NEAR(r.time.allocator_seconds_run, (15 + 1930 + 2 + 7 * 2) * 1e-6, 1e-12);
  EXPECT_NEAR(r.time.overhead_run, (15 + 1930 + 2 + 7 * 2) * 1e-6 / 10.0, 1e-12);
  estimate_time(t, *find_gpu_spec("a100"), a100, &r, 2);
  EXPECT_NEAR(r.time.allocator_seconds_run, (15 + 1930) * 1e-6, 1e-12);
  EXPECT_NEAR(r.time.overhead_run, (15 + 1930) * 1e-6 / 2.0, 1e-12);
  estimate_time(t, *find_gpu_spec("a100"), a100, &r);
  EXPECT_EQ(r.time.run_iterations, kDefaultRunIterations);
  EXPECT_NEAR(r.time.allocator_seconds_run, (15 + 1930 + 2 + 997 * 2) * 1e-6, 1e-12);
}

}  // namespace
}  // namespace stalloc
