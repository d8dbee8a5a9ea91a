#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "planner/chunk/chunk_plan.h"
#include "sim/stalloc_model.h"
#include "tests/planner/chunk/chunk_plan_test_traces.h"

namespace stalloc {
namespace {

using testing::kG;
using testing::TraceBuilder;

const char* const kVariants[] = {"stalloc", "stalloc-windowed", "stalloc-paper"};

struct Replay {
  bool ok = true;
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_allocated = 0;
  std::map<std::uint32_t, std::uint64_t> peak_reserved_in;  // per iteration
  std::map<std::uint32_t, std::uint64_t> calls_in;          // driver calls made in each iteration
};

// Replays a trace, checking that live allocations never overlap and reserved never drops below
// what is live.
Replay replay(const Trace& trace, const std::string& variant, std::uint64_t capacity = 0) {
  ModelOptions options;
  options.capacity = capacity;
  auto model = make_stalloc_model(trace, variant, options);
  Replay r;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> live;  // address -> (end, id)
  std::map<std::uint64_t, std::uint64_t> address_of;
  std::uint64_t allocated = 0;
  for (const Event& e : trace.events) {
    const std::uint64_t calls_before = model->driver_calls().total();
    if (e.kind == EventKind::Alloc) {
      std::uint64_t address = 0;
      if (!model->allocate(e, &address)) {
        r.ok = false;
        return r;
      }
      auto next = live.lower_bound(address);
      if (next != live.end()) {
        EXPECT_GE(next->first, address + std::max<std::uint64_t>(e.size, 1)) << variant << " id " << e.id;
      }
      if (next != live.begin()) {
        EXPECT_LE(std::prev(next)->second.first, address) << variant << " id " << e.id;
      }
      live[address] = {address + std::max<std::uint64_t>(e.size, 1), e.id};
      address_of[e.id] = address;
      allocated += e.size;
    } else {
      model->deallocate(e);
      live.erase(address_of.at(e.id));
      allocated -= e.size;
    }
    const std::uint64_t reserved = model->reserved_bytes();
    EXPECT_GE(reserved, allocated) << variant;
    r.peak_reserved = std::max(r.peak_reserved, reserved);
    r.peak_allocated = std::max(r.peak_allocated, allocated);
    r.peak_reserved_in[e.iteration] = std::max(r.peak_reserved_in[e.iteration], reserved);
    r.calls_in[e.iteration] += model->driver_calls().total() - calls_before;
  }
  return r;
}

TEST(StallocModel, UnknownVariantsAreRefused) {
  Trace t = TraceBuilder().alloc(1, 10).free(1).build();
  EXPECT_THROW(make_stalloc_model(t, "stalloc-turbo", {}), UsageError);
}

TEST(StallocModel, EveryVariantKeepsAllocationsApartAndReservedHonest) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const Trace t = testing::random_training_trace(seed, 4, 120);
    for (const char* v : kVariants) {
      const Replay r = replay(t, v);
      EXPECT_TRUE(r.ok) << v;
      EXPECT_EQ(r.peak_allocated, lower_bound_bytes(t));
    }
  }
}

TEST(StallocModel, SteadyIterationsUseThePlanWithNoDriverCallsInAliasMode) {
  const Trace t = testing::random_training_trace(4, 5, 150);
  const Replay r = replay(t, "stalloc");
  ASSERT_TRUE(r.ok);
  // Iteration 0 has no persistent tensors, so it has iteration 1's requests: its plan is used
  // from iteration 1 on, which installs the pool.
  EXPECT_GT(r.calls_in.at(1), 0u);
  for (std::uint32_t it = 2; it < 5; ++it) EXPECT_EQ(r.calls_in.at(it), 0u) << "iteration " << it;
  // Steady state: the pool plus at most the chunks of the tensor iteration 0 carried.
  const ChunkPlan plan = plan_iteration(t, 0, {});
  EXPECT_LE(r.peak_reserved_in.at(4), (plan.num_chunks + 12) * kG);
  EXPECT_GE(r.peak_reserved_in.at(4), plan.num_chunks * kG);
}

TEST(StallocModel, WindowedModeRemapsEveryIteration) {
  const Trace t = testing::random_training_trace(4, 4, 150);
  const Replay r = replay(t, "stalloc-windowed");
  ASSERT_TRUE(r.ok);
  PlanOptions options;
  options.mode = PlanMode::Windowed;
  EXPECT_EQ(r.calls_in.at(3), plan_iteration(t, 1, options).vmm_ops_per_iteration);
}

TEST(StallocModel, PaperServesTinyRequestsFromASlab) {
  TraceBuilder b;
  for (std::uint64_t i = 1; i <= 1000; ++i) b.alloc(i, 256);
  for (std::uint64_t i = 1; i <= 1000; ++i) b.free(i);
  const Replay r = replay(b.build(), "stalloc-paper");
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.peak_reserved, kG) << "1000 cells of 512 B fit in one slab page";
}

TEST(StallocModel, PersistentTensorsOfTheFirstIterationArePacked) {
  TraceBuilder b;
  for (std::uint64_t i = 1; i <= 8; ++i) b.alloc(i, kG / 4 + 512, 0);  // optimizer state, kept
  b.alloc(100, kG, 0).free(100, 0);
  const Replay r = replay(b.build(), "stalloc");
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.peak_reserved, 3 * kG + kG) << "2 G + 4 KiB packed into 3 chunks, 1 chunk dynamic";
}

TEST(StallocModel, ChangedFreeOrderFallsBackInsteadOfSharingBytes) {
  // Iterations 1 and 2 have the same requests, but in iteration 2 tensor a dies late, where the
  // plan gave its chunks to c.
  TraceBuilder b;
  std::uint64_t id = 1;
  for (std::uint32_t it = 0; it < 4; ++it) {
    const std::uint64_t a = id++, c = id++;
    b.alloc(a, 4 * kG, it);
    if (it != 2) b.free(a, it);
    b.alloc(c, 4 * kG, it);
    if (it == 2) b.free(a, it);
    b.free(c, it);
  }
  for (const char* v : kVariants) {
    const Replay r = replay(b.build(), v);
    EXPECT_TRUE(r.ok) << v;
    EXPECT_GE(r.peak_reserved_in.at(2), 8 * kG) << v;
  }
}

TEST(StallocModel, DynamicTensorsGrowOntoIdleChunks) {
  TraceBuilder b;
  std::uint64_t id = 1;
  for (std::uint32_t it = 0; it < 5; ++it) {
    const std::uint64_t big = id++, expert = id++;
    b.alloc(big, 8 * kG, it).free(big, it);
    b.alloc(expert, (2 + it % 3) * kG, it, 0, true).free(expert, it);
  }
  const Replay r = replay(b.build(), "stalloc");
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.peak_reserved_in.at(4), 8 * kG) << "the expert buffer lives on the big tensor's chunks";
}

TEST(StallocModel, OutOfMemoryUnderATinyCapacity) {
  const Trace t = testing::random_training_trace(2, 2, 50);
  for (const char* v : kVariants) EXPECT_FALSE(replay(t, v, 4 * kG).ok) << v;
}

}  // namespace
}  // namespace stalloc
