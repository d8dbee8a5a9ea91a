#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/error.h"
#include "sim/report_html.h"
#include "sim/time_estimate.h"

namespace stalloc {
namespace {

constexpr std::uint64_t MB = 1024 * 1024;

Event ev(EventKind kind, std::uint64_t id, std::uint64_t size, std::uint32_t iteration = 0) {
  Event e;
  e.kind = kind;
  e.id = id;
  e.size = size;
  e.iteration = iteration;
  return e;
}

// `iterations` copies of: two 5 MiB tensors, both freed.
Trace two_tensors(std::uint32_t iterations) {
  Trace t;
  std::uint64_t id = 1;
  for (std::uint32_t i = 0; i < iterations; ++i) {
    t.events.insert(t.events.end(), {ev(EventKind::Alloc, id, 5 * MB, i), ev(EventKind::Alloc, id + 1, 5 * MB, i),
                                     ev(EventKind::Free, id, 5 * MB, i), ev(EventKind::Free, id + 1, 5 * MB, i)});
    id += 2;
  }
  return t;
}

TEST(Simulator, PeaksUtilizationAndWaste) {
  SimResult r = simulate(two_tensors(1), "two", "pytorch", ModelOptions{});
  EXPECT_EQ(r.workload, "two");
  EXPECT_EQ(r.allocator, "pytorch");
  EXPECT_EQ(r.events, 4u);
  EXPECT_EQ(r.peak_allocated_bytes, 10 * MB);
  EXPECT_EQ(r.peak_reserved_bytes, 20 * MB);  // one 20 MiB segment
  EXPECT_DOUBLE_EQ(r.utilization, 0.5);
  EXPECT_EQ(r.waste_bytes, 10 * MB);
  EXPECT_FALSE(r.oom);
  EXPECT_EQ(r.driver_calls_per_iteration, 1.0);  // one iteration: its own calls
}

TEST(Simulator, SteadyStateDriverCallsExcludeTheFirstIteration) {
  SimResult r = simulate(two_tensors(3), "two", "pytorch", ModelOptions{});
  EXPECT_EQ(r.driver_calls_per_iteration, 0.0);  // the cached segment serves iterations 1 and 2
}

TEST(Simulator, StopsAtTheFirstAllocationOverCapacity) {
  ModelOptions options;
  options.capacity = 12 * MB;
  Trace t;
  t.events = {ev(EventKind::Alloc, 1, 11 * MB), ev(EventKind::Alloc, 2, 11 * MB), ev(EventKind::Free, 1, 11 * MB)};
  SimResult r = simulate(t, "w", "pytorch", options);
  EXPECT_TRUE(r.oom);
  EXPECT_EQ(r.oom_event, 1u);
  EXPECT_EQ(r.events, 1u);
  EXPECT_EQ(r.peak_reserved_bytes, 12 * MB);
}

TEST(Simulator, TimelineIsDownsampledAndKeepsThePeaks) {
  Trace t;
  for (std::uint64_t i = 0; i < 6000; ++i) {
    t.events.push_back(ev(EventKind::Alloc, i + 1, (i % 97 + 1) * MB));
    t.events.push_back(ev(EventKind::Free, i + 1, (i % 97 + 1) * MB));
  }
  SimResult r = simulate(t, "w", "pytorch", ModelOptions{});
  ASSERT_LE(r.timeline.size(), kMaxTimelinePoints);
  ASSERT_GE(r.timeline.size(), kMaxTimelinePoints / 2);
  EXPECT_EQ(r.timeline.back().event, t.events.size() - 1);
  auto max_alloc = std::max_element(r.timeline.begin(), r.timeline.end(),
                                    [](const auto& a, const auto& b) { return a.allocated < b.allocated; });
  auto max_res = std::max_element(r.timeline.begin(), r.timeline.end(),
                                  [](const auto& a, const auto& b) { return a.reserved < b.reserved; });
  EXPECT_EQ(max_alloc->allocated, r.peak_allocated_bytes);
  EXPECT_EQ(max_res->reserved, r.peak_reserved_bytes);
  for (std::size_t i = 1; i < r.timeline.size(); ++i) EXPECT_LT(r.timeline[i - 1].event, r.timeline[i].event);
}

TEST(Simulator, ShortTraceKeepsEveryEvent) {
  SimResult r = simulate(two_tensors(2), "two", "gmlake", ModelOptions{});
  ASSERT_EQ(r.timeline.size(), 8u);
  EXPECT_EQ(r.timeline[1].allocated, 10 * MB);
  EXPECT_EQ(r.timeline[3].allocated, 0u);
}

TEST(Simulator, UnknownAllocatorNamesTheKnownOnes) {
  try {
    simulate(two_tensors(1), "w", "tcmalloc", ModelOptions{});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("pytorch-expandable"), std::string::npos);
  }
}

TEST(Simulator, BadPytorchConfIsAUsageError) {
  ModelOptions options;
  options.pytorch_conf = "max_split_size_mb:abc";
  EXPECT_THROW(simulate(two_tensors(1), "w", "pytorch", options), UsageError);
}

TEST(Simulator, SweepFindsTheLargestMicroBatchThatFits) {
  ModelOptions options;
  options.capacity = 256 * MB;
  SweepResult r = sweep_largest(preset("tiny"), SweepParameter::MicroBatch, "pytorch", options);
  EXPECT_EQ(r.workload, "tiny");
  ASSERT_GE(r.largest, 1u);
  EXPECT_LE(r.peak_reserved_bytes, options.capacity);
  // One more micro-batch does not fit (the search ends between a fit and an OOM).
  if (r.largest < 4096) {
    GeneratorConfig next = preset("tiny");
    const std::uint64_t microbatches = microbatches_per_iteration(next);
    next.micro_batch = r.largest + 1;
    next.global_batch = microbatches * next.micro_batch * next.dp;
    EXPECT_TRUE(simulate(generate_trace(next), "tiny", "pytorch", options).oom);
  }
  options.capacity = MB;
  EXPECT_EQ(sweep_largest(preset("tiny"), SweepParameter::SeqLen, "pytorch", options).largest, 0u);
}

TEST(Simulator, ReportIsOneOfflinePageWithTableAndPlots) {
  ReportInput input;
  input.capacity = 64 * MB;
  input.results.push_back(simulate(two_tensors(2), "a<b", "pytorch", ModelOptions{}));
  input.results.push_back(simulate(two_tensors(2), "a<b", "gmlake", ModelOptions{}));
  for (SimResult& r : input.results) {
    estimate_time(two_tensors(2), *find_gpu_spec("a100"), *vmm::find_cost_table("a100"), &r);
  }
  SweepResult s;
  s.workload = "tiny";
  s.allocator = "pytorch";
  s.largest = 8;
  input.sweep.push_back(s);
  const std::string html = render_html_report(input);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("a&lt;b"), std::string::npos);  // names are escaped
  EXPECT_EQ(html.find("a<b"), std::string::npos);
  EXPECT_NE(html.find("50.0%"), std::string::npos);  // pytorch's utilization in the table
  std::size_t plots = 0;
  for (std::size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++plots;
  EXPECT_EQ(plots, 4u);  // per allocator: memory over time and driver time per iteration
  EXPECT_NE(html.find("Estimated driver time per iteration"), std::string::npos);
  // Two iterations: two bars per allocator.
  std::size_t bars = 0;
  const std::size_t section = html.find("Estimated driver time per iteration");
  for (std::size_t at = html.find("<rect", section); at != std::string::npos; at = html.find("<rect", at + 1)) ++bars;
  EXPECT_EQ(bars, 4u);
  EXPECT_NE(html.find("<td>8</td>"), std::string::npos);  // the sweep row
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http"), std::string::npos);
}

}  // namespace
}  // namespace stalloc
