// The captures in tests/data/real were recorded from real libtorch training (tools/capture,
// commands in tests/data/real/README.md). These tests hold the planner to traces nobody wrote by
// hand: they must read, be well formed, repeat when the workload repeats, and plan validly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "planner/chunk/chunk_plan.h"
#include "planner/chunk/plan_validator.h"
#include "trace/trace.h"
#include "trace/trace_io.h"

namespace stalloc {
namespace {

struct RealCapture {
  const char* file;
  std::uint32_t iterations;
  std::int32_t micro_batches;
  bool periodic;  // iterations after the first repeat the same requests
};

std::string capture_path(const RealCapture& c) {
  return std::string(STALLOC_SOURCE_DIR) + "/tests/data/real/" + c.file;
}

// What an allocator sees of one iteration: the kinds and sizes of its requests, in order.
std::vector<std::pair<EventKind, std::uint64_t>> requests_of(const Trace& trace, std::uint32_t iteration) {
  std::vector<std::pair<EventKind, std::uint64_t>> out;
  for (const Event& e : trace.events) {
    if (e.iteration == iteration) out.emplace_back(e.kind, e.size);
  }
  return out;
}

class RealTraceTest : public ::testing::TestWithParam<RealCapture> {
 protected:
  void SetUp() override { trace_ = read_trace(capture_path(GetParam())); }
  Trace trace_;
};

TEST_P(RealTraceTest, IsWellFormedAndFreesCarryTheirSize) {
  EXPECT_EQ(validate_trace(trace_), "");
  EXPECT_EQ(trace_.meta.at("source"), "stalloc-capture");
  std::unordered_map<std::uint64_t, std::uint64_t> live_size;
  for (const Event& e : trace_.events) {
    if (e.kind == EventKind::Alloc) {
      live_size[e.id] = e.size;
      EXPECT_GT(e.size, 0u) << "id " << e.id;
    } else {
      ASSERT_TRUE(live_size.count(e.id)) << "id " << e.id;
      EXPECT_EQ(e.size, live_size[e.id]) << "id " << e.id;
      live_size.erase(e.id);
    }
  }
}

TEST_P(RealTraceTest, HasEveryIterationAndPhase) {
  const RealCapture& c = GetParam();
  std::set<std::uint32_t> iterations;
  for (const Event& e : trace_.events) {
    iterations.insert(e.iteration);
    if (e.phase == Phase::Forward || e.phase == Phase::Backward) {
      EXPECT_GE(e.microbatch, 0);
      EXPECT_LT(e.microbatch, c.micro_batches);
    }
  }
  ASSERT_EQ(iterations.size(), c.iterations);
  EXPECT_EQ(*iterations.rbegin(), c.iterations - 1);
  for (std::uint32_t it = 0; it < c.iterations; ++it) {
    for (Phase p : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
      EXPECT_TRUE(std::any_of(trace_.events.begin(), trace_.events.end(),
                              [&](const Event& e) { return e.iteration == it && e.phase == p; }))
          << "iteration " << it << " has no " << phase_name(p) << " requests";
    }
  }
}

TEST_P(RealTraceTest, RepeatsExactlyWhenTheWorkloadRepeats) {
  const RealCapture& c = GetParam();
  ASSERT_GE(c.iterations, 3u);
  for (std::uint32_t it = 2; it < c.iterations; ++it) {
    const bool same = requests_of(trace_, it) == requests_of(trace_, it - 1);
    EXPECT_EQ(same, c.periodic) << "iterations " << it - 1 << " and " << it;
    EXPECT_EQ(signature_of(trace_, it) == signature_of(trace_, it - 1), c.periodic)
        << "signatures of iterations " << it - 1 << " and " << it;
  }
  // The first iteration also creates the gradients and the optimizer state, which stay.
  EXPECT_NE(requests_of(trace_, 0), requests_of(trace_, 1));
}

TEST_P(RealTraceTest, LowerBoundCoversThePersistentState) {
  std::uint64_t persistent = 0;
  for (const Lifetime& l : compute_lifetimes(trace_)) {
    if (l.persistent) persistent += l.size;
  }
  EXPECT_GT(persistent, 0u);
  EXPECT_GT(lower_bound_bytes(trace_), persistent);
}

TEST_P(RealTraceTest, PlanOfIterationOneValidates) {
  const ChunkPlan plan = plan_iteration(trace_, 1, PlanOptions{});
  const PlanValidation v = validate_plan(plan);
  EXPECT_TRUE(v.ok) << (v.errors.empty() ? "" : v.errors.front());
  EXPECT_EQ(plan.slots.size(), signature_of(trace_, 1).allocations);
  EXPECT_GT(v.lower_bound_bytes, 0u);
  EXPECT_GE(v.peak_physical_bytes, v.lower_bound_bytes);
}

INSTANTIATE_TEST_SUITE_P(Captures, RealTraceTest,
                         ::testing::Values(RealCapture{"fixed_seq128.trace", 4, 2, true},
                                           RealCapture{"recompute_seq128.trace", 4, 2, true},
                                           RealCapture{"varlen_seq64-192.trace", 5, 2, false}),
                         [](const ::testing::TestParamInfo<RealCapture>& param_info) {
                           std::string name = param_info.param.file;
                           name = name.substr(0, name.find('.'));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Recomputation trades compute for memory: the same model and batch must peak lower with it, and
// its backward must allocate more (each block's forward runs again).
TEST(RealTraceRecompute, PeaksLowerAndAllocatesMoreInBackward) {
  const Trace plain = read_trace(std::string(STALLOC_SOURCE_DIR) + "/tests/data/real/fixed_seq128.trace");
  const Trace recompute = read_trace(std::string(STALLOC_SOURCE_DIR) + "/tests/data/real/recompute_seq128.trace");
  EXPECT_LT(lower_bound_bytes(recompute), lower_bound_bytes(plain));
  auto backward_allocs = [](const Trace& t) {
    return std::count_if(t.events.begin(), t.events.end(), [](const Event& e) {
      return e.iteration == 1 && e.phase == Phase::Backward && e.kind == EventKind::Alloc;
    });
  };
  EXPECT_GT(backward_allocs(recompute), backward_allocs(plain));
}

}  // namespace
}  // namespace stalloc
