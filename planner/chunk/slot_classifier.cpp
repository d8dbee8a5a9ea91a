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
                              std::uint64_t small_threshold) {
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
  for (const Lifetime& l : compute_lifetimes(trace)) {
    if (l.iteration != iteration) continue;
    const std::uint64_t ordinal = out.allocations++;
    if (iteration == 0 && l.persistent) continue;
    PlannedSlot s;
    s.ordinal = ordinal;
    s.size = l.size;
    s.stream = l.stream;
    const bool freed_here = !l.persistent && trace.events[l.end].iteration == iteration;
    if (freed_here) {
      s.start = relative(l.start);
      s.end = relative(l.end);
    } else {
      s.start = 0;
      s.end = out.requests;
    }
    // A 0-byte tensor (torch.empty(0), an MoE expert that got no tokens) holds no bytes: it
    // gets no chunks and no budget. As a Dynamic slot it is matched by position like any other
    // request, so the plan installs (a Static slot of size 0 is refused by the installer) and
    // the runtime serves it outside the pool; planned at the alignment instead, it would be a
    // slot of 512 bytes that a 0-byte request never matches (a miss every iteration).
    if (l.dynamic || across.varies[ordinal] || l.size == 0) {
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
