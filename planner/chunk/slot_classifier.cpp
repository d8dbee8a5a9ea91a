#include "planner/chunk/slot_classifier.h"

#include <algorithm>
#include <map>
#include <string>

#include "common/error.h"

namespace stalloc {

namespace {

// Allocation sizes of every iteration, in order.
std::map<std::uint32_t, std::vector<std::uint64_t>> sizes_by_iteration(const Trace& trace) {
  std::map<std::uint32_t, std::vector<std::uint64_t>> out;
  for (const Event& e : trace.events) {
    if (e.kind == EventKind::Alloc) out[e.iteration].push_back(e.size);
  }
  return out;
}

// Per ordinal, the largest size in any iteration with the same number of allocations; an
// ordinal varies when that differs from its size here or any such iteration has another size.
struct OrdinalSizes {
  std::vector<bool> varies;
  std::vector<std::uint64_t> largest;
};

OrdinalSizes sizes_across_iterations(const Trace& trace, std::uint32_t iteration) {
  auto sizes = sizes_by_iteration(trace);
  const auto& mine = sizes[iteration];
  OrdinalSizes out{std::vector<bool>(mine.size(), false), mine};
  for (const auto& [it, other] : sizes) {
    if (it == iteration || other.size() != mine.size()) continue;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (other[i] != mine[i]) out.varies[i] = true;
      out.largest[i] = std::max(out.largest[i], other[i]);
    }
  }
  return out;
}

}  // namespace

IterationSlots classify_slots(const Trace& trace, std::uint32_t iteration,
                              std::uint64_t small_threshold, bool plan_one_offs) {
  std::vector<std::uint64_t> positions;  // event indices of the iteration, ascending
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    if (trace.events[i].iteration == iteration) positions.push_back(i);
  }
  if (positions.empty()) {
    throw UsageError("the trace has no iteration " + std::to_string(iteration));
  }
  auto relative = [&](std::uint64_t event_index) {
    return static_cast<std::uint64_t>(
        std::lower_bound(positions.begin(), positions.end(), event_index) - positions.begin());
  };

  IterationSlots out;
  out.requests = positions.size();
  const OrdinalSizes across = sizes_across_iterations(trace, iteration);
  const std::vector<Lifetime> lifetimes = compute_lifetimes(trace);
  // The tensors of earlier iterations freed in this one (last step's gradients, freed by this
  // step's zero_grad), by (size, stream), in the order of their frees: the tensors of this
  // iteration that live on into the next are taken to be freed there at the same times.
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::vector<std::uint64_t>> carried_frees;
  for (const Lifetime& l : lifetimes) {
    if (l.iteration < iteration && !l.persistent && trace.events[l.end].iteration == iteration) {
      carried_frees[{l.size, l.stream}].push_back(relative(l.end));
    }
  }
  for (auto& [key, times] : carried_frees) std::sort(times.begin(), times.end());
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::size_t> carried_used;
  for (const Lifetime& l : lifetimes) {
    if (l.iteration != iteration) continue;
    const std::uint64_t ordinal = out.allocations++;
    if (iteration == 0 && l.persistent) continue;
    PlannedSlot s;
    s.ordinal = ordinal;
    s.size = l.size;
    s.stream = l.stream;
    const bool freed_here = !l.persistent && trace.events[l.end].iteration == iteration;
    bool meets_next_instance = false;
    if (freed_here) {
      s.start = relative(l.start);
      s.end = relative(l.end);
    } else {
      // Live on into the next iteration: over [start, requests) and, wrapping around,
      // [0, free) of the next, written as [start, requests + free). If that free comes after
      // this allocation (the tensor would meet its own next instance), over the whole iteration.
      s.start = 0;
      s.end = out.requests;
      const auto key = std::make_pair(l.size, l.stream);
      const auto frees = carried_frees.find(key);
      std::size_t& used = carried_used[key];
      const bool matched = frees != carried_frees.end() && used < frees->second.size();
      // Without a matching free of the iteration before, the tensor did not come from the
      // iteration before and need not come from the next: a buffer made again at each new
      // longest sequence, state made lazily, a tensor kept for good. Planned over the whole
      // iteration, its slot was one that the next iterations did not fill (llama7b-varlen's
      // 47 MB sequence-parallel gather buffer, Megatron's GlobalMemoryBuffer, made in iteration
      // 1 and freed in iteration 10: iteration 2's requests each went to the slot before their
      // own, Dynamic slots taking any size, and the plan was left). Left out, as iteration 0's
      // persistent tensors are, it is served dynamically when it comes. Iteration 0 has no
      // iteration before: its carried slots stay.
      if (!matched && !plan_one_offs && iteration > 0) continue;
      if (matched) {
        const std::uint64_t next_free = frees->second[used++];
        const std::uint64_t allocated = relative(l.start);
        if (next_free <= allocated) {
          s.start = allocated;
          s.end = out.requests + next_free;
        } else {
          // Made before its previous instance is freed (an optimizer step that writes new
          // parameters or states, then drops the old): its slot is always still held when it
          // is asked for, so planned in place it would only reserve pool bytes it never gets.
          meets_next_instance = true;
        }
      }
    }
    // A 0-byte tensor (torch.empty(0), an MoE expert that got no tokens) holds no bytes: it
    // gets no chunks and no budget. As a Dynamic slot it is matched by position like any other
    // request, so the plan installs (a Static slot of size 0 is refused by the installer) and
    // the runtime serves it outside the pool; planned at the alignment instead, it would be a
    // slot of 512 bytes that a 0-byte request never matches (a miss every iteration).
    if (l.dynamic || across.varies[ordinal] || l.size == 0 || meets_next_instance) {
      s.kind = SlotKind::Dynamic;
    } else if (l.size < small_threshold) {
      s.kind = SlotKind::Small;
    } else {
      s.kind = SlotKind::Static;
    }
    out.slots.push_back(std::move(s));
    out.max_size.push_back(across.largest[ordinal]);
  }
  return out;
}

}  // namespace stalloc
