#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "common/error.h"
#include "planner/chunk/chunk_plan.h"
#include "planner/chunk/plan_validator.h"
#include "tests/planner/chunk/chunk_plan_test_traces.h"

namespace stalloc {
namespace {

using testing::kG;
using testing::TraceBuilder;

ChunkPlan plan_and_validate(const Trace& trace, std::uint32_t iteration, PlanOptions options = {}) {
  ChunkPlan plan = plan_iteration(trace, iteration, options);
  const PlanValidation v = validate_plan(plan);
  EXPECT_TRUE(v.ok) << (v.errors.empty() ? "" : v.errors.front());
  EXPECT_EQ(v.lower_bound_bytes, plan.lower_bound_bytes);
  EXPECT_LE(v.peak_chunks_in_use, plan.num_chunks);
  EXPECT_GE(plan.num_chunks * plan.granularity, plan.lower_bound_bytes);
  return plan;
}

const PlannedSlot& slot(const ChunkPlan& plan, std::uint64_t ordinal) {
  auto it = std::find_if(plan.slots.begin(), plan.slots.end(),
                         [&](const PlannedSlot& s) { return s.ordinal == ordinal; });
  EXPECT_NE(it, plan.slots.end()) << "no slot " << ordinal;
  return *it;
}

TEST(ChunkPlanPlanner, WholeChunkSlotsAreColouredOptimally) {
  // a and b overlap, c reuses a's chunks after a dies.
  Trace t = TraceBuilder().alloc_as(1, 2 * kG).alloc_as(2, 3 * kG).free(1).alloc_as(3, 2 * kG).free(2).free(3).trace();
  ChunkPlan plan = plan_and_validate(t, 0);
  EXPECT_EQ(plan.num_chunks, 5u);
  EXPECT_EQ(plan.lower_bound_bytes, 5 * kG);
  EXPECT_DOUBLE_EQ(plan_utilization(plan), 1.0);
  EXPECT_EQ(slot(plan, 0).chunks.size(), 2u);
  EXPECT_EQ(slot(plan, 1).chunks.size(), 3u);
  EXPECT_EQ(slot(plan, 0).offset, 0u);
}

// Four 64 TiB tensors span 2^27 chunks of 2 MiB: refused before any chunk entry is made (the
// planner once took 14 GB and 33 s of planning for them). At the limit itself the plan is made.
TEST(ChunkPlanPlanner, ViewsSpanningMoreChunksThanTheLimitAreRefused) {
  TraceBuilder huge;
  for (std::uint64_t i = 1; i <= 4; ++i) huge.alloc_as(i, 1ull << 46);
  for (std::uint64_t i = 1; i <= 4; ++i) huge.free(i);
  try {
    (void)plan_iteration(huge.trace(), 0, {});
    ADD_FAILURE() << "planned";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("iteration 0: its tensors span 134217732 chunks of 2.00 MiB, "
                                         "more than the planner's limit of 16777216"),
              std::string::npos)
        << e.what();
  }
  // 2 G + 3 G: (2 + 1) + (3 + 1) = 7 chunk entries at most.
  Trace t = TraceBuilder().alloc_as(1, 2 * kG).alloc_as(2, 3 * kG).free(1).free(2).trace();
  PlanOptions options;
  options.max_view_chunks = 7;
  EXPECT_EQ(plan_and_validate(t, 0, options).num_chunks, 5u);
  options.max_view_chunks = 6;
  EXPECT_THROW((void)plan_iteration(t, 0, options), UsageError);
}

TEST(ChunkPlanPlanner, TailsAndSmallTensorsShareChunks) {
  // 1.5 G + 0.5 G live together: two chunks suffice, a chunk-rounding allocator needs three.
  Trace t = TraceBuilder().alloc_as(1, kG + kG / 2).alloc_as(2, kG / 2).free(2).free(1).trace();
  ChunkPlan plan = plan_and_validate(t, 0);
  EXPECT_EQ(plan.num_chunks, 2u);
  EXPECT_EQ(slot(plan, 1).kind, SlotKind::Small);
  EXPECT_EQ(slot(plan, 0).kind, SlotKind::Static);
}

TEST(ChunkPlanPlanner, ManySmallTensorsPackIntoFewChunks) {
  TraceBuilder b;
  for (std::uint64_t i = 1; i <= 64; ++i) b.alloc_as(i, kG / 64);
  for (std::uint64_t i = 1; i <= 64; ++i) b.free(i);
  ChunkPlan plan = plan_and_validate(b.trace(), 0);
  EXPECT_EQ(plan.num_chunks, 1u);
}

TEST(ChunkPlanPlanner, BothRemainderPlacementsAreValidAndAutoKeepsTheBetter) {
  Trace t = testing::random_training_trace(7, 2, 300);
  PlanOptions options;
  options.remainder = RemainderPlacement::Widened;
  const ChunkPlan widened = plan_and_validate(t, 1, options);
  options.remainder = RemainderPlacement::Aligned;
  const ChunkPlan aligned = plan_and_validate(t, 1, options);
  options.remainder = RemainderPlacement::Auto;
  const ChunkPlan best = plan_and_validate(t, 1, options);
  EXPECT_EQ(best.num_chunks, std::min(widened.num_chunks, aligned.num_chunks));
  EXPECT_EQ(widened.remainder, RemainderPlacement::Widened);
  EXPECT_EQ(aligned.remainder, RemainderPlacement::Aligned);
}

TEST(ChunkPlanPlanner, RandomTracesGiveValidPlansInEveryMode) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    Trace t = testing::random_training_trace(seed, 3, 150);
    for (PlanMode mode : {PlanMode::Alias, PlanMode::Windowed, PlanMode::Offset}) {
      PlanOptions options;
      options.mode = mode;
      ChunkPlan plan = plan_and_validate(t, 1, options);
      EXPECT_EQ(plan.mode, mode);
      EXPECT_EQ(plan.lower_bound_bytes, plan_and_validate(t, 2, options).lower_bound_bytes);
    }
  }
}

TEST(ChunkPlanPlanner, SlotsAreRelativeToTheIterationAndCarriedOnesSpanIt) {
  Trace t = TraceBuilder()
                .at(0).alloc_as(1, 4096).alloc_as(2, 8192)  // 1 is persistent, 2 carried into iteration 1
                .at(1).alloc_as(3, 4096).free(2).free(3).alloc_as(4, kG)  // 4 carried out
                .at(2).free(4)
                .trace();
  ChunkPlan it0 = plan_and_validate(t, 0);
  ASSERT_EQ(it0.slots.size(), 1u) << "iteration 0's persistent allocation is not planned";
  EXPECT_EQ(it0.slots[0].ordinal, 1u);
  EXPECT_EQ(it0.slots[0].start, 0u);
  EXPECT_EQ(it0.slots[0].end, 2u);

  ChunkPlan it1 = plan_and_validate(t, 1);
  ASSERT_EQ(it1.slots.size(), 2u);
  EXPECT_EQ(slot(it1, 0).start, 0u);
  EXPECT_EQ(slot(it1, 0).end, 2u);
  EXPECT_EQ(slot(it1, 1).start, 0u) << "a slot freed in a later iteration spans the whole iteration";
  EXPECT_EQ(slot(it1, 1).end, 4u);
  EXPECT_EQ(it1.signature.requests, 4u);
  EXPECT_EQ(it1.signature.allocations, 2u);
}

TEST(ChunkPlanPlanner, SizesThatVaryAcrossIterationsAreDynamicWithIdleBudget) {
  TraceBuilder b;
  for (std::uint32_t it = 0; it < 3; ++it) {
    const std::uint64_t base = 10 * it;
    b.at(it).alloc_as(base + 1, 4 * kG).free(base + 1);   // idle afterwards: budget for the expert
    b.at(it).alloc_as(base + 2, (3 + it) * kG);               // varies: dynamic
    b.at(it).alloc_as(base + 3, kG, 0, true);                 // hinted dynamic
    b.at(it).free(base + 2).free(base + 3);
  }
  ChunkPlan plan = plan_and_validate(b.trace(), 1);
  EXPECT_EQ(slot(plan, 0).kind, SlotKind::Static);
  EXPECT_EQ(slot(plan, 1).kind, SlotKind::Dynamic);
  EXPECT_EQ(slot(plan, 2).kind, SlotKind::Dynamic);
  EXPECT_EQ(plan.num_chunks, 4u) << "dynamic slots do not grow the pool";
  EXPECT_EQ(slot(plan, 1).budget_chunks.size(), 4u);
  EXPECT_TRUE(slot(plan, 1).chunks.empty());
  EXPECT_EQ(plan.dynamic_peak_bytes, 5 * kG);
  EXPECT_EQ(plan.lower_bound_bytes, 4 * kG);
}

TEST(ChunkPlanPlanner, SmallThresholdDecidesSmallSlots) {
  Trace t = TraceBuilder().alloc_as(1, kG / 2).alloc_as(2, kG / 8).free(1).free(2).trace();
  PlanOptions options;
  options.small_threshold = kG / 4;
  ChunkPlan plan = plan_and_validate(t, 0, options);
  EXPECT_EQ(slot(plan, 0).kind, SlotKind::Static);
  EXPECT_EQ(slot(plan, 1).kind, SlotKind::Small);
  EXPECT_EQ(plan.num_chunks, 1u);
}

TEST(ChunkPlanPlanner, AliasPlansCountEveryMappingAndNoCallsPerIteration) {
  Trace t = testing::random_training_trace(3, 2, 100);
  ChunkPlan plan = plan_and_validate(t, 1);
  std::uint64_t sum = 0;
  for (const PlannedSlot& s : plan.slots) sum += s.chunks.size();
  EXPECT_EQ(plan.mappings, sum);
  EXPECT_EQ(plan.vmm_ops_per_iteration, 0u);
}

TEST(ChunkPlanPlanner, WindowedPlansMapAroundUse) {
  // Eight requests, two windows: slot 0 lives in window 0 only, slot 1 in both.
  Trace t = TraceBuilder()
                .alloc_as(1, 2 * kG).alloc_as(2, kG).free(1).alloc_as(3, 3 * kG)
                .alloc_as(4, 512).free(4).free(3).free(2)
                .trace();
  PlanOptions options;
  options.mode = PlanMode::Windowed;
  options.windows = 2;
  ChunkPlan plan = plan_and_validate(t, 0, options);
  EXPECT_EQ(plan.windows, 2u);
  // Windows are requests [0, 4) and [4, 8). Slot 0 [0, 2) and slot 3 [4, 5) live in one window
  // each and are mapped and unmapped every iteration; slots 1 and 2 touch both and stay mapped.
  const PlannedSlot& s0 = slot(plan, 0);
  const PlannedSlot& s3 = slot(plan, 3);
  EXPECT_EQ(plan.vmm_ops_per_iteration, (2 * s0.chunks.size() + 1) + (2 * s3.chunks.size() + 1));
  EXPECT_EQ(plan.mappings, 6u);  // window 0: 2 + 1 + 3 chunks

  options.windows = 1;
  EXPECT_EQ(plan_and_validate(t, 0, options).vmm_ops_per_iteration, 0u);
}

TEST(ChunkPlanPlanner, OffsetPlansUseConsecutivePoolChunks) {
  Trace t = testing::random_training_trace(11, 2, 120);
  PlanOptions options;
  options.mode = PlanMode::Offset;
  ChunkPlan plan = plan_and_validate(t, 1, options);
  for (const PlannedSlot& s : plan.slots) {
    for (std::size_t j = 1; j < s.chunks.size(); ++j) EXPECT_EQ(s.chunks[j], s.chunks[j - 1] + 1);
    EXPECT_EQ(s.offset % options.alignment, 0u);
  }
  EXPECT_EQ(plan.mappings, plan.num_chunks);
}

TEST(ChunkPlanPlanner, ArenaOffsetsKeepTensorAlignment) {
  Trace t = testing::random_training_trace(5, 2, 200);
  ChunkPlan plan = plan_and_validate(t, 1);
  for (const PlannedSlot& s : plan.slots) EXPECT_EQ(s.offset % 512, 0u) << "slot " << s.ordinal;
}

TEST(ChunkPlanPlanner, EmptyAndZeroSizedSlotsNeedNoChunks) {
  Trace persistent_only = TraceBuilder().at(0).alloc_as(1, kG).alloc_as(2, 3 * kG).trace();
  ChunkPlan empty = plan_and_validate(persistent_only, 0);
  EXPECT_TRUE(empty.slots.empty());
  EXPECT_EQ(empty.num_chunks, 0u);
  EXPECT_DOUBLE_EQ(plan_utilization(empty), 1.0);

  Trace zero = TraceBuilder().alloc_as(1, 0).alloc_as(2, 100).free(1).free(2).trace();
  ChunkPlan plan = plan_and_validate(zero, 0);
  EXPECT_TRUE(slot(plan, 0).chunks.empty());
  EXPECT_EQ(plan.num_chunks, 1u);
}

TEST(ChunkPlanPlanner, RejectsMissingIterationsAndBadOptions) {
  Trace t = TraceBuilder().alloc_as(1, 100).free(1).trace();
  EXPECT_THROW(plan_iteration(t, 3, {}), UsageError);
  PlanOptions zero;
  zero.granularity = 0;
  EXPECT_THROW(plan_iteration(t, 0, zero), UsageError);
  PlanOptions odd;
  odd.alignment = 48;
  EXPECT_THROW(plan_iteration(t, 0, odd), UsageError);
  Trace bad;  // a free of an allocation the trace never made (the builder refuses to write one)
  Event free_only;
  free_only.kind = EventKind::Free;
  free_only.id = 9;
  bad.events.push_back(free_only);
  EXPECT_THROW(plan_iteration(bad, 0, {}), UsageError);
}

TEST(ChunkPlanSignature, IdenticalIterationsShareASignature) {
  Trace t = testing::random_training_trace(2, 3, 50);
  EXPECT_EQ(signature_of(t, 1), signature_of(t, 2));
  Trace other = t;
  for (Event& e : other.events) {
    if (e.iteration == 2 && e.kind == EventKind::Alloc) {
      e.size += 512;
      break;
    }
  }
  EXPECT_NE(signature_of(other, 1).hash, signature_of(other, 2).hash);
  Trace streams = t;
  for (Event& e : streams.events) {
    if (e.iteration == 2 && e.kind == EventKind::Alloc) {
      e.stream = 1;
      break;
    }
  }
  EXPECT_NE(signature_of(streams, 1).hash, signature_of(streams, 2).hash);
}

TEST(ChunkPlanSignature, MismatchedPlansAreRefusedWithBothSignatures) {
  Trace t = testing::random_training_trace(2, 2, 40);
  ChunkPlan plan = plan_and_validate(t, 1);
  EXPECT_NO_THROW(require_plan_matches(plan, signature_of(t, 1)));
  Trace shorter = testing::random_training_trace(2, 2, 39);
  try {
    require_plan_matches(plan, signature_of(shorter, 1));
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("plan was made for a trace with signature"), std::string::npos) << what;
    EXPECT_NE(what.find("(40 allocations"), std::string::npos) << what;
    EXPECT_NE(what.find("(39 allocations"), std::string::npos) << what;
  }
}

TEST(ChunkPlanModes, NamesRoundTrip) {
  for (PlanMode m : {PlanMode::Alias, PlanMode::Windowed, PlanMode::Offset}) {
    PlanMode parsed{};
    ASSERT_TRUE(parse_plan_mode(plan_mode_name(m), &parsed));
    EXPECT_EQ(parsed, m);
  }
  PlanMode unused{};
  EXPECT_FALSE(parse_plan_mode("paper", &unused));
}

}  // namespace
}  // namespace stalloc
