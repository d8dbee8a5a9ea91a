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

// Allocation sizes and live counts of a pipeline-like program: per iteration a warm-up, a run
// of identical micro-batches at the peak, then a cool-down; `odd` adds one allocation to the
// cool-down of iteration `odd`.
struct Request {
  std::uint64_t size;
  std::uint64_t live;
};
std::vector<Request> pipeline_requests(int iterations, int micro_batches, int odd = -1) {
  std::vector<Request> out;
  std::uint64_t live = 3;
  for (int it = 0; it < iterations; ++it) {
    for (std::uint64_t w = 0; w < 4; ++w) out.push_back({1000 + w, live++});
    for (int mb = 0; mb < micro_batches; ++mb) {
      out.push_back({5000, live});
      out.push_back({6000, live + 1});
      out.push_back({7000, live + 2});
    }
    for (std::uint64_t c = 0; c < (it == odd ? 3u : 2u); ++c) out.push_back({9000 + c, live});
    live -= 4;
  }
  return out;
}

std::vector<std::size_t> boundaries(const std::vector<Request>& requests, PeriodDetector& d) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (d.boundary_before(requests[i].size, 0, requests[i].live)) out.push_back(i);
  }
  return out;
}

// The micro-batch repeats first and is found first; once its run ends, the period is dropped and
// the iteration is found.
TEST(PeriodDetector, DropsAMicroBatchPeriodForTheIteration) {
  constexpr int kMicroBatches = 12;
  const std::uint64_t per_iteration = 4 + 3 * kMicroBatches + 2;
  PeriodDetector d;
  const std::vector<std::size_t> b = boundaries(pipeline_requests(8, kMicroBatches), d);
  EXPECT_EQ(d.dropped(), 1u);
  EXPECT_EQ(d.period(), per_iteration);
  ASSERT_GE(b.size(), 3u);
  EXPECT_EQ(b[b.size() - 1] - b[b.size() - 2], per_iteration);
  EXPECT_EQ(b[b.size() - 2] - b[b.size() - 3], per_iteration);
}

// A period that has held kTrustedRepeats times is an iteration: one odd iteration (an extra
// tensor) does not drop it, and boundaries go on.
TEST(PeriodDetector, KeepsATrustedPeriodThroughOneOddIteration) {
  constexpr int kIterations = static_cast<int>(PeriodDetector::kTrustedRepeats) + 10;
  PeriodDetector d;
  const std::vector<std::size_t> b =
      boundaries(pipeline_requests(kIterations, 1, kIterations - 4), d);
  EXPECT_EQ(d.dropped(), 0u);
  ASSERT_GE(b.size(), 3u);
  EXPECT_EQ(b[b.size() - 1] - b[b.size() - 2], d.period());
  EXPECT_GE(b.size(), PeriodDetector::kTrustedRepeats);
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

// A pipeline schedule: every iteration repeats one micro-batch's requests many times, so the
// detector takes a micro-batch for an iteration until the program's first step() (the torch
// extension steps from the optimizer's hook). One tensor of the last micro-batch of iteration 0
// stays live for good, in a slot of a plan made from those micro-batches. Once the program
// steps, the runtime plans its real iterations, clear of that tensor: a steady iteration follows
// its plan with no conflict and no driver call.
TEST(RuntimeAutoStep, DisownsMicroBatchesOnceTheProgramSteps) {
  auto driver = host_driver();
  Runtime rt(test_config("auto_step:true,profile_iterations:1,mode:offset"), *driver);
  std::vector<std::pair<void*, std::uint64_t>> live;
  auto alloc = [&](std::uint64_t size) {
    void* p = rt.malloc(size, 0, 0);
    EXPECT_NE(p, nullptr);
    if (p != nullptr) std::memset(p, static_cast<int>(size % 251), 64);
    return p;
  };
  auto release = [&](void* p, std::uint64_t size) {
    EXPECT_EQ(static_cast<unsigned char*>(p)[0], size % 251) << size;
    rt.free(p, size, 0, 0);
  };
  for (int w = 0; w < 3; ++w) live.emplace_back(alloc(3 * kG + 1000 * w), 3 * kG + 1000 * w);
  constexpr int kIterations = 6;
  constexpr int kMicroBatches = 12;
  RuntimeStats before;
  for (int it = 0; it < kIterations; ++it) {
    if (it == kIterations - 1) before = rt.stats();
    std::vector<std::pair<void*, std::uint64_t>> warm;
    for (std::uint64_t k = 1; k <= 3; ++k) warm.emplace_back(alloc(k * kG + 4096), k * kG + 4096);
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      const std::uint64_t x_size = 4 * kG + 512;
      const std::uint64_t y_size = 2 * kG + 512;
      void* x = alloc(x_size);
      void* y = alloc(y_size);
      release(y, y_size);
      if (it == 0 && mb == kMicroBatches - 1) {
        live.emplace_back(x, x_size);
      } else {
        release(x, x_size);
      }
      // A micro-batch's kernels take long enough for the background planner to finish.
      rt.wait_for_planning();
    }
    for (auto [p, size] : warm) release(p, size);
    rt.step();
    rt.wait_for_planning();
  }
  const RuntimeStats after = rt.stats();
  EXPECT_GT(after.auto_steps, 0u) << "the detector never cut a micro-batch: nothing was tested";
  EXPECT_EQ(after.conflicts - before.conflicts, 0u);
  EXPECT_EQ(after.misses - before.misses, 0u);
  EXPECT_EQ(after.matches - before.matches, 3u + 2u * kMicroBatches);
  EXPECT_EQ(after.vmm_calls() - before.vmm_calls(), 0u);
  for (auto [p, size] : live) release(p, size);
}

}  // namespace
}  // namespace stalloc
