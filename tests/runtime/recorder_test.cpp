#include "src/recorder.h"

#include <gtest/gtest.h>

#include <vector>

#include "planner/chunk/chunk_plan.h"

namespace stalloc {
namespace {

// One iteration: each size allocated, then all freed.
void record_iteration(Recorder& r, const std::vector<std::uint64_t>& sizes) {
  std::vector<std::uint64_t> ids;
  for (std::uint64_t s : sizes) ids.push_back(r.alloc(s, 0, 0, 0x1000));
  for (std::size_t i = 0; i < ids.size(); ++i) r.free(ids[i], sizes[i], 0, 0, 0x1000);
}

// The varying ordinals after these iterations, among those of the first iteration's count (or
// of the last one's).
std::vector<bool> varying_after(const std::vector<std::vector<std::uint64_t>>& iterations,
                                bool of_last = false) {
  Recorder r;
  for (const auto& sizes : iterations) {
    record_iteration(r, sizes);
    r.next_iteration(false);
  }
  const std::vector<bool>* v =
      r.varying_ordinals((of_last ? iterations.back() : iterations.front()).size());
  return v == nullptr ? std::vector<bool>{} : *v;
}

// An extra tensor at the front and one fewer at the end shift every other size to its
// neighbour's ordinal: a one-off, only the new tensor's ordinal varies.
TEST(Recorder, AShiftedIterationMakesOnlyTheNewSizeVary) {
  EXPECT_EQ(varying_after({{10, 20, 30, 40}, {5, 10, 20, 30}}),
            (std::vector<bool>{true, false, false, false}));
}

// A size no neighbour had (a new sequence length) varies at once; a shift seen twice varies.
TEST(Recorder, NewSizesVaryAtOnceShiftsWhenRepeated) {
  EXPECT_EQ(varying_after({{10, 20, 30, 40}, {10, 21, 30, 41}}),
            (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(varying_after({{1, 2, 2, 3}, {1, 1, 2, 3}}), (std::vector<bool>(4, false)));
  EXPECT_EQ(varying_after({{1, 2, 2, 3}, {1, 1, 2, 3}, {1, 2, 2, 3}}),
            (std::vector<bool>{false, true, false, false}));
}

// The first iteration with a count a few allocations off the last one's (a warm-up that also
// made the optimizer state, a dropped tensor) is compared with it aligned around the place
// where the allocations differ: sizes new to their ordinal vary at once.
TEST(Recorder, AnIterationAFewAllocationsOffIsComparedAlignedWithTheLast) {
  // Two dropped at the front.
  EXPECT_EQ(varying_after({{100, 7, 10, 20, 30, 40}, {10, 21, 30, 41}}, true),
            (std::vector<bool>{false, true, false, true}));
  // One dropped in the middle.
  EXPECT_EQ(varying_after({{10, 20, 99, 30, 40}, {10, 21, 30, 41}}, true),
            (std::vector<bool>{false, true, false, true}));
  // One added at the end: nothing known of it, the others unchanged.
  EXPECT_EQ(varying_after({{10, 20, 30}, {10, 20, 30, 55}}, true), (std::vector<bool>(4, false)));
  // What varied before is carried over.
  EXPECT_EQ(varying_after({{5, 10, 20, 30}, {5, 10, 21, 30}, {9, 5, 10, 22, 30}}, true),
            (std::vector<bool>{false, false, false, true, false}));
}

// Counts further apart are other structures: the first of its count is where comparing starts.
TEST(Recorder, AnIterationManyAllocationsOffStartsItsOwnComparison) {
  EXPECT_EQ(varying_after({{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {10, 21}}, true),
            (std::vector<bool>(2, false)));
}

// A warm-up: `extra` tensors made and freed before the first forward pass, a persistent one,
// then the iteration's own tensors.
void record_warm_up(Recorder& r, std::size_t extra, const std::vector<std::uint64_t>& sizes) {
  std::vector<std::uint64_t> ids;
  for (std::size_t i = 0; i < extra; ++i) ids.push_back(r.alloc(7 + i, 0, 0, 0x1000));
  for (std::size_t i = 0; i < extra; ++i) r.free(ids[i], 7 + i, 0, 0, 0x1000);
  r.alloc(999'999, 0, 0, 0x1000);  // weights: never freed
  record_iteration(r, sizes);
}

// Sizes that scale with a sequence length, every tenth one fixed.
std::vector<std::uint64_t> scaled(std::uint64_t length, std::size_t count) {
  std::vector<std::uint64_t> sizes;
  for (std::size_t i = 0; i < count; ++i) {
    sizes.push_back(i % 10 == 0 ? 5000 + i : length * (i + 1));
  }
  return sizes;
}

std::vector<bool> scaled_varying(std::size_t count) {
  std::vector<bool> v;
  for (std::size_t i = 0; i < count; ++i) v.push_back(i % 10 != 0);
  return v;
}

std::vector<bool> dynamic_of(const Trace& t);

// The Dynamic marks of the first iteration after the warm-up, as planned with varying_sizes
// dynamic at its end.
std::vector<bool> dynamic_after_warm_up(std::size_t extra, const std::vector<std::uint64_t>& warm,
                                        const std::vector<std::uint64_t>& first) {
  Recorder r;
  record_warm_up(r, extra, warm);
  r.next_iteration(false);
  record_iteration(r, first);
  r.compare_sizes();
  return dynamic_of(r.iteration_trace(VaryingSizes::Dynamic));
}

// The first iteration after a warm-up that also made a few tensors (at most 1/8 more) is
// compared with the warm-up's tensors freed in it, aligned: a new sequence length makes its
// sizes Dynamic already in the first plan. Only Dynamic: with `auto` too, and with `largest`
// the sizes are planned as they came, until a second iteration of the count tells whether they
// vary together.
TEST(Recorder, TheFirstIterationIsComparedWithTheWarmUpsOwnTensors) {
  EXPECT_EQ(dynamic_after_warm_up(5, scaled(100, 40), scaled(337, 40)), scaled_varying(40));

  Recorder r;
  record_warm_up(r, 5, scaled(100, 40));
  r.next_iteration(false);
  record_iteration(r, scaled(337, 40));
  r.compare_sizes();
  VaryingSizes chosen = VaryingSizes::Off;
  EXPECT_EQ(dynamic_of(r.iteration_trace(VaryingSizes::Auto, &chosen)), scaled_varying(40));
  EXPECT_EQ(chosen, VaryingSizes::Dynamic);
  const Trace largest = r.iteration_trace(VaryingSizes::Largest);
  EXPECT_EQ(dynamic_of(largest), std::vector<bool>(40, false));
  std::vector<std::uint64_t> planned;
  for (const Event& e : largest.events) {
    if (e.kind == EventKind::Alloc) planned.push_back(e.size);
  }
  EXPECT_EQ(planned, scaled(337, 40));
  EXPECT_EQ(r.varying_ordinals(40), nullptr);

  r.next_iteration(false);
  record_iteration(r, scaled(211, 40));
  r.next_iteration(false);
  const std::vector<bool>* varying = r.varying_ordinals(40);
  ASSERT_NE(varying, nullptr);
  EXPECT_EQ(*varying, scaled_varying(40));
}

// The same sizes after a warm-up: nothing varies. Sizes the warm-up made a few ordinals away
// are taken for shifts, so that a misalignment does not make fixed tensors vary.
TEST(Recorder, AWarmUpOfTheSameSizesOrOfShiftedOnesMakesNothingVary) {
  EXPECT_EQ(dynamic_after_warm_up(5, scaled(100, 40), scaled(100, 40)),
            std::vector<bool>(40, false));
  std::vector<std::uint64_t> shifted = scaled(100, 40);
  shifted.insert(shifted.begin() + 20, 123);  // one more in the warm-up's middle
  EXPECT_EQ(dynamic_after_warm_up(4, shifted, scaled(100, 40)), std::vector<bool>(40, false));
}

// Under 3/4 of the sizes new (an MoE routing changes some), the warm-up decides nothing: the
// next iteration of the count is compared as before. More extra tensors than 1/8 of the
// iteration's: no comparison.
TEST(Recorder, AWarmUpDecidesOnlyWhenMostSizesChanged) {
  std::vector<std::uint64_t> half = scaled(100, 40);
  for (std::size_t i = 0; i < 40; i += 2) half[i] += 1;
  std::vector<std::uint64_t> warm = scaled(100, 40);
  EXPECT_EQ(dynamic_after_warm_up(5, warm, half), std::vector<bool>(40, false));
  EXPECT_EQ(dynamic_after_warm_up(6, scaled(100, 40), scaled(337, 40)),
            std::vector<bool>(40, false));
}

// Settled sizes: compared with a warm-up or with the last iteration of the count, at most 1/16
// of the ordinals changed (a plan's pool then makes runs); changed sizes: more than that (a plan
// of fixed slots then waits, Runtime); before any comparison, neither.
TEST(Recorder, SizesAreSettledOnlyWhenAComparisonFoundFewChanged) {
  Recorder r;
  record_iteration(r, scaled(100, 40));
  r.compare_sizes();
  EXPECT_FALSE(r.sizes_settled());  // the first of its count, nothing compared
  EXPECT_FALSE(r.sizes_changed());
  r.next_iteration(false);
  record_iteration(r, scaled(100, 40));
  r.compare_sizes();
  EXPECT_TRUE(r.sizes_settled());
  r.compare_sizes();  // again: still this iteration's comparison
  EXPECT_TRUE(r.sizes_settled());
  EXPECT_FALSE(r.sizes_changed());
  r.next_iteration(false);
  std::vector<std::uint64_t> routed = scaled(100, 40);
  for (std::size_t i = 0; i < 40; i += 4) routed[i] += 1;  // a routing: 10 of 40 changed
  record_iteration(r, routed);
  r.next_iteration(false);
  EXPECT_FALSE(r.sizes_settled());
  EXPECT_TRUE(r.sizes_changed());
  std::vector<std::uint64_t> few = routed;
  few[1] += 1;
  few[2] += 1;  // 2 of 40
  record_iteration(r, few);
  r.next_iteration(false);
  EXPECT_TRUE(r.sizes_settled());
  EXPECT_FALSE(r.sizes_changed());

  Recorder after_warm_up;
  record_warm_up(after_warm_up, 5, scaled(100, 40));
  after_warm_up.next_iteration(false);
  record_iteration(after_warm_up, scaled(100, 40));
  after_warm_up.next_iteration(false);
  EXPECT_TRUE(after_warm_up.sizes_settled());
  Recorder routed_after_warm_up;
  record_warm_up(routed_after_warm_up, 5, scaled(100, 40));
  routed_after_warm_up.next_iteration(false);
  record_iteration(routed_after_warm_up, routed);
  routed_after_warm_up.next_iteration(false);
  EXPECT_FALSE(routed_after_warm_up.sizes_settled());
  EXPECT_TRUE(routed_after_warm_up.sizes_changed());
}

// With varying_sizes:dynamic the varying ordinals are marked dynamic, and the signature leaves
// their sizes out: two iterations that differ only there have one signature.
TEST(Recorder, DynamicTraceMarksVaryingOrdinalsAndKeepsTheSignature) {
  Recorder r;
  record_iteration(r, {10, 20, 30});
  r.next_iteration(false);
  record_iteration(r, {10, 25, 30});
  r.next_iteration(false);
  record_iteration(r, {10, 27, 30});
  const Trace a = r.iteration_trace(VaryingSizes::Dynamic);
  r.next_iteration(false);
  record_iteration(r, {10, 22, 30});
  const Trace b = r.iteration_trace(VaryingSizes::Dynamic);
  std::vector<bool> dynamic;
  for (const Event& e : a.events) {
    if (e.kind == EventKind::Alloc) dynamic.push_back(e.dynamic);
  }
  EXPECT_EQ(dynamic, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(signature_of(a, 2), signature_of(b, 3));
  const Trace off = r.iteration_trace(VaryingSizes::Off);
  EXPECT_NE(signature_of(off, 3), signature_of(b, 3));
}

// Sizes that grow and shrink together (one sequence length) are planned at their largest
// under varying_sizes:auto: the largest sizes together hold no more than the longest iteration.
// Sizes that trade bytes (two expert buffers whose sum is constant) are not: their largest
// together exceed every iteration.
TEST(Recorder, SizesVaryTogetherWhenTheirLargestFitTheLongestIteration) {
  auto together_after = [](const std::vector<std::vector<std::uint64_t>>& iterations) {
    Recorder r;
    for (std::size_t i = 0; i < iterations.size(); ++i) {
      if (i > 0) r.next_iteration(false);
      record_iteration(r, iterations[i]);
    }
    r.compare_sizes();
    VaryingSizes chosen = VaryingSizes::Off;
    r.iteration_trace(VaryingSizes::Auto, &chosen);
    EXPECT_NE(chosen, VaryingSizes::Off);
    return chosen == VaryingSizes::Largest;
  };
  EXPECT_TRUE(together_after({{10, 100, 200}, {10, 150, 300}, {10, 120, 240}}));
  EXPECT_FALSE(together_after({{10, 100, 200}, {10, 200, 100}, {10, 150, 150}}));
  EXPECT_FALSE(together_after({{10, 100, 200}, {10, 100, 200}}));  // nothing varies
}

std::vector<bool> dynamic_of(const Trace& t) {
  std::vector<bool> out;
  for (const Event& e : t.events) {
    if (e.kind == EventKind::Alloc) out.push_back(e.dynamic);
  }
  return out;
}

// The iteration being planned counts too once its sizes were compared: the second iteration
// with as many allocations already has its changed ordinal marked dynamic.
TEST(Recorder, ComparingTheCurrentIterationMarksItsOwnChanges) {
  Recorder r;
  record_iteration(r, {10, 20, 30});
  r.next_iteration(false);
  record_iteration(r, {10, 25, 30});
  EXPECT_EQ(dynamic_of(r.iteration_trace(VaryingSizes::Dynamic)), (std::vector<bool>(3, false)));
  r.compare_sizes();
  EXPECT_EQ(dynamic_of(r.iteration_trace(VaryingSizes::Dynamic)),
            (std::vector<bool>{false, true, false}));
}

// Comparing again, as next_iteration does, counts an iteration once: a shift to a neighbour's
// size (one change) does not become two.
TEST(Recorder, AnIterationIsComparedOnce) {
  Recorder r;
  record_iteration(r, {10, 20, 30});
  r.next_iteration(false);
  record_iteration(r, {10, 30, 30});
  r.compare_sizes();
  r.compare_sizes();
  EXPECT_EQ(dynamic_of(r.iteration_trace(VaryingSizes::Dynamic)), (std::vector<bool>(3, false)));
  r.next_iteration(false);
  const std::vector<bool>* varying = r.varying_ordinals(3);
  ASSERT_NE(varying, nullptr);
  EXPECT_EQ(*varying, (std::vector<bool>(3, false)));
}

// A tensor of the previous iteration freed in this one stands in the iteration trace as an
// allocation of the iteration before, so that the planner learns when this iteration's own
// carried tensors are freed.
TEST(Recorder, TensorsCarriedIntoTheIterationAppearAsAllocationsOfTheOneBefore) {
  Recorder r;
  const std::uint64_t grad = r.alloc(300, 0, 0, 0x1000);
  r.next_iteration(true);
  const std::uint64_t act = r.alloc(500, 0, 0, 0x2000);
  r.free(grad, 300, 0, 0, 0x1000);
  r.free(act, 500, 0, 0, 0x2000);
  const Trace t = r.iteration_trace(VaryingSizes::Dynamic);
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.events[0].kind, EventKind::Alloc);
  EXPECT_EQ(t.events[0].id, grad);
  EXPECT_EQ(t.events[0].size, 300u);
  EXPECT_EQ(t.events[0].iteration + 1, t.events[1].iteration);
  EXPECT_EQ(t.events[2].kind, EventKind::Free);
  EXPECT_EQ(t.events[2].id, grad);
  EXPECT_TRUE(validate_trace(t).empty()) << validate_trace(t);
  EXPECT_EQ(signature_of(t, t.events[1].iteration).allocations, 1u);
}

}  // namespace
}  // namespace stalloc
