// One suite every allocator model must pass, whatever its policy: live allocations never overlap
// in its address space, it never reserves less than is live, the simulator sees the trace's lower
// bound as peak allocated, a repeated iteration does not grow it, and a tiny capacity is an OOM.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "workload/generator.h"
#include "trace/trace.h"
#include "sim/allocator_model.h"
#include "sim/simulator.h"

namespace stalloc {
namespace {

constexpr std::uint64_t MB = 1024 * 1024;

// A few persistent tensors, then `iterations` copies of one random iteration: sizes from
// 100 B to 700 MiB (small pool, 20 MiB segments, large and stitchable), two streams, tensors
// freed in random order while others are allocated.
Trace random_trace(std::uint32_t seed, std::uint32_t iterations = 3) {
  std::mt19937_64 rng(seed);
  auto pick_size = [&rng]() -> std::uint64_t {
    switch (rng() % 4) {
      case 0: return 100 + rng() % (MB - 100);
      case 1: return MB + rng() % (9 * MB);
      case 2: return 10 * MB + rng() % (200 * MB);
      default: return (rng() % 8 == 0) ? 500 * MB + rng() % (200 * MB) : 20 * MB + rng() % (60 * MB);
    }
  };
  struct Step {
    bool alloc;
    std::size_t slot;
  };
  std::vector<std::uint64_t> sizes;
  std::vector<std::uint32_t> streams;
  std::vector<Step> steps;
  std::vector<std::size_t> live;
  for (int i = 0; i < 120; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      std::size_t k = rng() % live.size();
      steps.push_back({false, live[k]});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      sizes.push_back(pick_size());
      streams.push_back(rng() % 5 == 0 ? 1u : 0u);
      live.push_back(sizes.size() - 1);
      steps.push_back({true, sizes.size() - 1});
    }
  }
  for (std::size_t slot : live) steps.push_back({false, slot});

  Trace t;
  std::uint64_t id = 1;
  for (int p = 0; p < 3; ++p) {
    Event e;
    e.id = id++;
    e.size = 3 * MB + static_cast<std::uint64_t>(p) * 4096;
    t.events.push_back(e);
  }
  for (std::uint32_t it = 0; it < iterations; ++it) {
    std::vector<std::uint64_t> ids(sizes.size());
    for (const Step& s : steps) {
      Event e;
      e.kind = s.alloc ? EventKind::Alloc : EventKind::Free;
      if (s.alloc) ids[s.slot] = id++;
      e.id = ids[s.slot];
      e.size = sizes[s.slot];
      e.stream = streams[s.slot];
      e.iteration = it;
      t.events.push_back(e);
    }
  }
  return t;
}

// Replays the trace and checks every allocation's range against the live ones.
// Without a capacity every allocation must succeed; with one the replay stops at the first OOM.
void expect_disjoint_and_covered(const std::string& name, const Trace& trace, const ModelOptions& options = {}) {
  auto model = make_allocator_model(name, trace, options);
  std::map<std::uint64_t, std::uint64_t> live;  // start -> end
  std::map<std::uint64_t, std::uint64_t> start_of;  // id -> start
  std::uint64_t allocated = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.kind == EventKind::Alloc) {
      std::uint64_t a = 0;
      const bool served = model->allocate(e, &a);
      if (!served && options.capacity > 0) return;
      ASSERT_TRUE(served) << name << " ran out of memory without a capacity at event " << i;
      const std::uint64_t end = a + e.size;
      auto next = live.lower_bound(a);
      if (next != live.end()) {
        ASSERT_GE(next->first, end) << name << ": event " << i << " overlaps the allocation at " << next->first;
      }
      if (next != live.begin()) {
        ASSERT_LE(std::prev(next)->second, a) << name << ": event " << i << " overlaps the allocation before it";
      }
      live.emplace(a, end);
      start_of[e.id] = a;
      allocated += e.size;
    } else {
      model->deallocate(e);
      live.erase(start_of.at(e.id));
      start_of.erase(e.id);
      allocated -= e.size;
    }
    ASSERT_GE(model->reserved_bytes(), allocated) << name << " at event " << i;
  }
}

class AllocatorModelConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(AllocatorModelConformance, LiveAllocationsNeverOverlapOnRandomTraces) {
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_disjoint_and_covered(GetParam(), random_trace(seed));
  }
}

TEST_P(AllocatorModelConformance, RetriesUnderCapacityKeepAllocationsDisjoint) {
  // A capacity a little above the lower bound makes the policies release and retry.
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    const Trace t = random_trace(seed);
    ModelOptions options;
    options.capacity = lower_bound_bytes(t) + lower_bound_bytes(t) / 4;
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_disjoint_and_covered(GetParam(), t, options);
  }
}

TEST_P(AllocatorModelConformance, LiveAllocationsNeverOverlapOnTinyPreset) {
  expect_disjoint_and_covered(GetParam(), generate_trace(preset("tiny")));
}

TEST_P(AllocatorModelConformance, PeakAllocatedIsTheLowerBound) {
  for (const Trace& t : {random_trace(7), generate_trace(preset("tiny"))}) {
    SimResult r = simulate(t, "w", GetParam(), ModelOptions{});
    EXPECT_FALSE(r.oom);
    EXPECT_EQ(r.peak_allocated_bytes, lower_bound_bytes(t));
    EXPECT_GE(r.peak_reserved_bytes, r.peak_allocated_bytes);
    EXPECT_LE(r.utilization, 1.0);
  }
}

TEST_P(AllocatorModelConformance, RepeatingAnIterationDoesNotGrowReserved) {
  // Whatever a policy keeps after the first iterations, the same requests again fit in it.
  const Trace t = random_trace(11, 4);
  auto model = make_allocator_model(GetParam(), t, ModelOptions{});
  std::vector<std::uint64_t> peak(4, 0);
  for (const Event& e : t.events) {
    if (e.kind == EventKind::Alloc) {
      std::uint64_t a = 0;
      ASSERT_TRUE(model->allocate(e, &a));
    } else {
      model->deallocate(e);
    }
    peak[e.iteration] = std::max(peak[e.iteration], model->reserved_bytes());
  }
  EXPECT_LE(peak[3], peak[2]);
  EXPECT_LE(peak[2], peak[1]);
}

TEST_P(AllocatorModelConformance, TinyCapacityIsOutOfMemory) {
  ModelOptions options;
  options.capacity = 4 * MB;
  SimResult r = simulate(random_trace(3), "w", GetParam(), options);
  EXPECT_TRUE(r.oom);
  EXPECT_LT(r.events, random_trace(3).events.size());
}

INSTANTIATE_TEST_SUITE_P(AllModels, AllocatorModelConformance, ::testing::ValuesIn(allocator_model_names()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string n = param.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace stalloc
