// Tensors made in one iteration and freed in the next: planned wrapped around the iteration's
// end when their previous instance is freed before they are made (gradients dropped by the
// next step's zero_grad), left out of the pool when it is freed after (an optimizer step that
// writes new states, then drops the old).
#include <gtest/gtest.h>

#include <algorithm>

#include "planner/chunk/chunk_plan.h"
#include "planner/chunk/plan_validator.h"
#include "planner/chunk/slot_classifier.h"
#include "tests/planner/chunk/chunk_plan_test_traces.h"

namespace stalloc {
namespace {

using testing::kG;
using testing::TraceBuilder;

// Per iteration: the input (2 chunks), last step's gradient freed (zero_grad), two activations
// of 6 chunks, the second freed and the gradient (6 chunks) made in its place, the first freed,
// the input freed. The gradient lives on into the next iteration, until its zero_grad.
Trace zero_grad_trace(int iterations) {
  TraceBuilder b;
  std::uint64_t id = 1;
  std::uint64_t grad = 0;
  for (std::uint32_t it = 0; it < static_cast<std::uint32_t>(iterations); ++it) {
    const std::uint64_t input = id++, a1 = id++, a2 = id++, g = id++;
    b.at(it).alloc_as(input, 2 * kG);
    if (grad != 0) b.at(it).free(grad);
    b.at(it).alloc_as(a1, 6 * kG).alloc_as(a2, 6 * kG).free(a2).alloc_as(g, 6 * kG);
    b.at(it).free(a1).free(input);
    grad = g;
  }
  return b.trace();
}

const PlannedSlot& slot_at(const ChunkPlan& plan, std::uint64_t ordinal) {
  return *std::find_if(plan.slots.begin(), plan.slots.end(),
                       [&](const PlannedSlot& s) { return s.ordinal == ordinal; });
}

TEST(CarriedSlots, AGradientWrapsAroundTheIterationEnd) {
  const Trace trace = zero_grad_trace(3);
  const IterationSlots in = classify_slots(trace, 1, kG);
  ASSERT_EQ(in.requests, 8u);
  // The gradient (ordinal 3) is made at request 5 and freed at request 1 of the next.
  const PlannedSlot& g = in.slots[3];
  EXPECT_EQ(g.start, 5u);
  EXPECT_EQ(g.end, 8u + 1u);
  EXPECT_EQ(g.kind, SlotKind::Static);

  PlanOptions options;
  options.granularity = kG;
  for (PlanMode mode : {PlanMode::Alias, PlanMode::Offset}) {
    options.mode = mode;
    const ChunkPlan plan = plan_iteration(trace, 1, options);
    // Live at once at most: input, last gradient (requests 0-1), then input and two
    // activations: 14 chunks; the gradient planned over the whole iteration made it 20.
    EXPECT_EQ(plan.num_chunks, 14u) << plan_mode_name(mode);
    EXPECT_EQ(plan.lower_bound_bytes, 14 * kG) << plan_mode_name(mode);
    EXPECT_EQ(slot_at(plan, 3).end, 9u);  // the plan keeps the wrapped lifetime
    const PlanValidation v = validate_plan(plan);
    EXPECT_TRUE(v.ok) << (v.errors.empty() ? "" : v.errors[0]);
  }
}

TEST(CarriedSlots, ATensorMadeBeforeItsPreviousInstanceIsFreedIsLeftOutOfThePool) {
  TraceBuilder b;
  std::uint64_t id = 1;
  std::uint64_t state = 0;
  for (std::uint32_t it = 0; it < 3; ++it) {
    const std::uint64_t act = id++, next = id++;
    b.at(it).alloc_as(act, 4 * kG).alloc_as(next, 3 * kG);
    if (state != 0) b.at(it).free(state);  // the old state goes after the new one is written
    b.at(it).free(act);
    state = next;
  }
  const IterationSlots in = classify_slots(b.trace(), 1, kG);
  EXPECT_EQ(in.slots[1].kind, SlotKind::Dynamic);
  EXPECT_EQ(in.slots[0].kind, SlotKind::Static);
  PlanOptions options;
  options.granularity = kG;
  const ChunkPlan plan = plan_iteration(b.trace(), 1, options);
  EXPECT_EQ(plan.num_chunks, 4u);  // the activation alone
  EXPECT_TRUE(validate_plan(plan).ok);
}

// A tensor carried out with no free of the iteration before to stand for it (a buffer remade at
// a new longest length, state made lazily) is planned over the whole iteration; with
// plan_one_offs false (the runtime's plans with Dynamic slots) it is left out and the plan
// reserves nothing for it. Iteration 0 has no iteration before: there it stays either way.
TEST(CarriedSlots, WithoutAMatchingFreeATensorSpansTheIterationOrIsLeftOut) {
  TraceBuilder b;
  b.at(0).alloc_as(1, 2 * kG).alloc_as(4, kG).alloc_as(5, kG).free(5).free(1);  // 4 carried
  b.at(1).alloc_as(2, 2 * kG).alloc_as(3, 3 * kG).free(2);  // 3 is never freed
  b.at(1).free(4);
  const Trace trace = b.trace();
  const IterationSlots kept = classify_slots(trace, 1, kG);
  ASSERT_EQ(kept.slots.size(), 2u);
  EXPECT_EQ(kept.slots[1].start, 0u);
  EXPECT_EQ(kept.slots[1].end, kept.requests);
  EXPECT_EQ(kept.slots[1].kind, SlotKind::Static);

  const IterationSlots in = classify_slots(trace, 1, kG, false);
  EXPECT_EQ(in.allocations, 2u);
  ASSERT_EQ(in.slots.size(), 1u);
  EXPECT_EQ(in.slots[0].ordinal, 0u);
  PlanOptions options;
  options.granularity = kG;
  EXPECT_EQ(plan_iteration(trace, 1, options).num_chunks, 5u);  // tensors 2 and 3
  options.plan_one_offs = false;
  const ChunkPlan plan = plan_iteration(trace, 1, options);
  EXPECT_EQ(plan.num_chunks, 2u);  // tensor 2 alone
  EXPECT_TRUE(validate_plan(plan).ok);

  const IterationSlots first = classify_slots(trace, 0, kG, false);
  ASSERT_EQ(first.slots.size(), 3u);
  EXPECT_EQ(first.slots[1].start, 0u);
  EXPECT_EQ(first.slots[1].end, first.requests);
  EXPECT_EQ(first.slots[1].kind, SlotKind::Static);
}

}  // namespace
}  // namespace stalloc
