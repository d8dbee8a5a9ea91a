// Turns one iteration of a trace into the slots the physical-chunk planner places: lifetimes
// relative to the iteration's first request, classified Static, Small or Dynamic.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/chunk/chunk_plan.h"
#include "trace/trace.h"

namespace stalloc {

struct IterationSlots {
  std::vector<PlannedSlot> slots;  // by ordinal; iteration 0's persistent allocations are left out
  std::uint64_t requests = 0;      // events of the iteration
  std::uint64_t allocations = 0;   // allocations of the iteration, including those left out
  // Parallel to slots: the largest size at the slot's ordinal in any iteration with as many
  // allocations (what a dynamic slot may grow to).
  std::vector<std::uint64_t> max_size;
};

// Throws UsageError when the trace has no event in that iteration or is malformed.
// A slot not freed within the iteration, allocated at a, whose (size, stream) matches a tensor of
// an earlier iteration freed in this one at f <= a (the k-th such slot the k-th such free), is
// live over [a, requests + f): to the end and, wrapping around, until f in the next iteration.
// If its matching free comes after its allocation (its previous instance is still live when it
// is made) it is live over the whole iteration [0, requests) and Dynamic: served beside the
// pool, which would never get to place it. A slot not freed within the iteration with no
// matching free (a one-off: a buffer remade at a new longest length, state made lazily) is live
// over the whole iteration; with plan_one_offs false it is left out (counted in allocations,
// not in slots), except in iteration 0, which has no iteration before.
// Dynamic: the event's dynamic hint, or another iteration with as many allocations has another
// size at the same ordinal, or the allocation is of 0 bytes (no chunks, no budget: matched by
// position, served outside the pool). Small: below small_threshold. Static: everything else.
IterationSlots classify_slots(const Trace& trace, std::uint32_t iteration,
                              std::uint64_t small_threshold, bool plan_one_offs = true);

}  // namespace stalloc
