#include <gtest/gtest.h>

#include <map>

#include "sim/stalloc_model.h"
#include "tests/planner/chunk/chunk_plan_test_traces.h"

namespace stalloc {
namespace {

using testing::kG;
using testing::TraceBuilder;

struct Replay {
  bool ok = true;
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_allocated = 0;
  std::map<std::uint32_t, std::uint64_t> peak_reserved_in;  // per iteration
};

// Replays a trace through the stalloc-paper model, checking that live allocations never overlap
// and reserved never drops below what is live.
Replay replay(const Trace& trace, std::uint64_t capacity = 0) {
  ModelOptions options;
  options.capacity = capacity;
  auto model = make_stalloc_paper_model(trace, options);
  Replay r;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> live;  // address -> (end, id)
  std::map<std::uint64_t, std::uint64_t> address_of;
  std::uint64_t allocated = 0;
  for (const Event& e : trace.events) {
    if (e.kind == EventKind::Alloc) {
      std::uint64_t address = 0;
      if (!model->allocate(e, &address)) {
        r.ok = false;
        return r;
      }
      auto next = live.lower_bound(address);
      if (next != live.end()) {
        EXPECT_GE(next->first, address + std::max<std::uint64_t>(e.size, 1)) << "id " << e.id;
      }
      if (next != live.begin()) {
        EXPECT_LE(std::prev(next)->second.first, address) << "id " << e.id;
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
    EXPECT_GE(reserved, allocated);
    r.peak_reserved = std::max(r.peak_reserved, reserved);
    r.peak_allocated = std::max(r.peak_allocated, allocated);
    r.peak_reserved_in[e.iteration] = std::max(r.peak_reserved_in[e.iteration], reserved);
  }
  return r;
}

TEST(StallocPaperModel, KeepsAllocationsApartAndReservedHonest) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const Trace t = testing::random_training_trace(seed, 4, 120);
    const Replay r = replay(t);
    EXPECT_TRUE(r.ok) << "seed " << seed;
    EXPECT_EQ(r.peak_allocated, lower_bound_bytes(t));
  }
}

TEST(StallocPaperModel, ServesTinyRequestsFromASlab) {
  TraceBuilder b;
  for (std::uint64_t i = 1; i <= 1000; ++i) b.alloc_as(i, 256);
  for (std::uint64_t i = 1; i <= 1000; ++i) b.free(i);
  const Replay r = replay(b.trace());
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.peak_reserved, kG) << "1000 cells of 512 B fit in one slab page";
}

TEST(StallocPaperModel, ChangedFreeOrderFallsBackInsteadOfSharingBytes) {
  // Iterations 1 and 2 have the same requests, but in iteration 2 tensor a dies late, where the
  // plan gave its chunks to c.
  TraceBuilder b;
  std::uint64_t id = 1;
  for (std::uint32_t it = 0; it < 4; ++it) {
    const std::uint64_t a = id++, c = id++;
    b.at(it).alloc_as(a, 4 * kG);
    if (it != 2) b.at(it).free(a);
    b.at(it).alloc_as(c, 4 * kG);
    if (it == 2) b.at(it).free(a);
    b.at(it).free(c);
  }
  const Replay r = replay(b.trace());
  EXPECT_TRUE(r.ok);
  EXPECT_GE(r.peak_reserved_in.at(2), 8 * kG);
}

TEST(StallocPaperModel, DynamicTensorsGrowOntoIdleChunks) {
  TraceBuilder b;
  std::uint64_t id = 1;
  for (std::uint32_t it = 0; it < 5; ++it) {
    const std::uint64_t big = id++, expert = id++;
    b.at(it).alloc_as(big, 8 * kG).free(big);
    b.at(it).alloc_as(expert, (2 + it % 3) * kG, 0, true).free(expert);
  }
  const Replay r = replay(b.trace());
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.peak_reserved_in.at(4), 8 * kG) << "the expert buffer lives on the big tensor's chunks";
}

TEST(StallocPaperModel, OutOfMemoryUnderATinyCapacity) {
  const Trace t = testing::random_training_trace(2, 2, 50);
  EXPECT_FALSE(replay(t, 4 * kG).ok);
}

}  // namespace
}  // namespace stalloc
