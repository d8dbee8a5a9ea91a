#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "src/period_detector.h"
#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

// Feeds the allocations of a trace with their live counts; returns the allocation indices at
// which the detector started an iteration.
std::vector<std::size_t> boundaries(const Trace& trace) {
  PeriodDetector d;
  std::vector<std::size_t> out;
  std::uint64_t live = 0;
  std::size_t index = 0;
  for (const Event& e : trace.events) {
    if (e.kind == EventKind::Free) {
      --live;
      continue;
    }
    if (d.boundary_before(e.size, e.stream, live)) out.push_back(index);
    ++live;
    ++index;
  }
  return out;
}

TEST(PeriodDetector, FindsTheIterationNotTheRepeatedLayers) {
  // 8 layers per iteration: the layer pattern repeats inside every iteration.
  const Trace trace = periodic_trace(8, 2 * kG, 8);
  const std::uint64_t per = allocations_per_iteration(8);
  std::vector<std::size_t> b = boundaries(trace);
  ASSERT_GE(b.size(), 3u);
  for (std::size_t i = 1; i < b.size(); ++i) EXPECT_EQ(b[i] - b[i - 1], per);
  // Boundaries fall where iterations start: after the 3 weights, at a multiple of per.
  EXPECT_EQ((b[0] - 3) % per, 0u);
}

TEST(PeriodDetector, NoPeriodInANonRepeatingSequence) {
  PeriodDetector d;
  for (std::uint64_t i = 0; i < 5000; ++i) EXPECT_FALSE(d.boundary_before(1000 + i, 0, i % 7));
  EXPECT_FALSE(d.found());
}

TEST(RuntimeAutoStep, PlansWithoutExplicitSteps) {
  auto driver = host_driver();
  Runtime rt(test_config("auto_step:true,profile_iterations:1"), *driver);
  const Trace trace = periodic_trace(10);
  std::unordered_map<std::uint64_t, void*> live;
  std::uint32_t iteration = 0;
  for (const Event& e : trace.events) {
    if (e.iteration != iteration) {
      rt.wait_for_planning();
      iteration = e.iteration;
    }
    if (e.kind == EventKind::Alloc) {
      live[e.id] = rt.malloc(e.size, 0, 0);
      ASSERT_NE(live[e.id], nullptr);
      std::memset(live[e.id], static_cast<int>(e.id & 0xff), std::min<std::uint64_t>(e.size, 64));
    } else {
      EXPECT_EQ(static_cast<unsigned char*>(live[e.id])[0], e.id & 0xff);
      rt.free(live[e.id], e.size, 0, 0);
    }
  }
  RuntimeStats s = rt.stats();
  EXPECT_GE(s.auto_steps, 5u);
  EXPECT_GE(s.plan_installs, 1u);
  EXPECT_GE(s.matches, 3 * allocations_per_iteration());
}

}  // namespace
}  // namespace stalloc
