// The physical-chunk planner (design brief section 4; docs/planner.md "Physical-chunk planner").
//
// Whole chunks of static slots are interval-coloured directly: colouring in start order is
// optimal, so they cost nothing beyond the lower bound. Only bytes that do not fill a chunk (slot
// tails and small tensors) need packing: they go into one shared arena laid out by the offset
// planner, and the arena is then cut into chunk-sized pieces whose busy intervals are coloured
// together with the private chunks. A slot's range is [arena chunks before a boundary][its
// private chunks][arena chunks after], so its tail must straddle or touch a chunk boundary of the
// arena; RemainderPlacement says how that is guaranteed.
#include "planner/chunk/chunk_plan.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "common/units.h"
#include "planner/chunk/chunk_colouring.h"
#include "planner/chunk/lifetime_rotation.h"
#include "planner/chunk/slot_classifier.h"

namespace stalloc {

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// The part of a slot laid out in the arena.
struct ArenaPart {
  std::size_t slot = 0;
  std::uint64_t size = 0;
  std::uint64_t alignment = 1;
  std::uint64_t private_chunks = 0;  // chunks spliced in at the boundary
  bool boundary_at_start = false;    // Aligned: the boundary is the part's first byte
};

// Busy intervals of one arena chunk, merged, with the demand each became.
struct ArenaChunkBusy {
  std::vector<std::uint64_t> starts;
  std::vector<std::uint64_t> ends;
  std::vector<std::size_t> demand;

  std::size_t demand_at(std::uint64_t t) const {
    auto it = std::upper_bound(starts.begin(), starts.end(), t);
    return demand[static_cast<std::size_t>(it - starts.begin()) - 1];
  }
};

// A dynamic slot's budget: chunks idle over its lifetime, enough for twice the largest size seen
// at its ordinal. Each slot starts its search where the previous one stopped, so dynamic slots
// live at the same time get different chunks where the idle ones allow.
void fill_budgets(ChunkPlan& plan, const std::vector<std::uint64_t>& max_size) {
  if (plan.num_chunks == 0) return;
  ChunkOccupancy occupancy(plan.num_chunks);
  for (const PlannedSlot& s : plan.slots) {
    for (std::uint32_t c : s.chunks) occupancy.add(c, s.start, s.end);
  }
  occupancy.seal();
  std::uint64_t cursor = 0;
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    PlannedSlot& s = plan.slots[i];
    if (s.kind != SlotKind::Dynamic) continue;
    const std::uint64_t want = 2 * ceil_div(std::max(s.size, max_size[i]), plan.granularity);
    // One run of consecutive chunks where the idle ones allow: the runtime then sees the budget
    // through the pool's view and maps no view of its own for it.
    std::size_t run = occupancy.idle_run(s.start, s.end, cursor, want);
    if (run == SIZE_MAX && cursor > 0) run = occupancy.idle_run(s.start, s.end, 0, want);
    if (run != SIZE_MAX) {
      s.budget_chunks.resize(want);
      std::iota(s.budget_chunks.begin(), s.budget_chunks.end(), static_cast<std::uint32_t>(run));
    } else {
      s.budget_chunks = occupancy.idle_over(s.start, s.end, cursor, want);
    }
    if (!s.budget_chunks.empty()) cursor = (s.budget_chunks.back() + 1ull) % plan.num_chunks;
  }
}

// Peak of the summed sizes of the slots `counted` selects.
template <typename Pred>
std::uint64_t peak_live_bytes(const std::vector<PlannedSlot>& slots, Pred counted) {
  std::vector<std::pair<std::uint64_t, std::int64_t>> steps;
  for (const PlannedSlot& s : slots) {
    if (!counted(s)) continue;
    steps.emplace_back(s.start, static_cast<std::int64_t>(s.size));
    steps.emplace_back(s.end, -static_cast<std::int64_t>(s.size));
  }
  // Frees before allocations at the same time: lifetimes are half-open.
  std::sort(steps.begin(), steps.end());
  std::int64_t live = 0, peak = 0;
  for (const auto& [t, delta] : steps) {
    live += delta;
    peak = std::max(peak, live);
  }
  return static_cast<std::uint64_t>(peak);
}

// Mappings live at once and VMM calls per iteration, on the iteration's own timeline: a slot
// carried into the next iteration stays mapped in every window.
void fill_mapping_figures(ChunkPlan& plan, std::uint64_t requests) {
  plan.mappings = 0;
  plan.vmm_ops_per_iteration = 0;
  switch (plan.mode) {
    case PlanMode::Offset:
      plan.mappings = plan.num_chunks;  // one pool range, mapped once
      break;
    case PlanMode::Alias:
      for (const PlannedSlot& s : plan.slots) plan.mappings += s.chunks.size();
      break;
    case PlanMode::Windowed: {
      const std::uint64_t w = plan.windows;
      auto window_of = [&](std::uint64_t t) { return std::min(w - 1, t * w / requests); };
      std::vector<std::int64_t> live(w + 1, 0);
      for (const PlannedSlot& s : plan.slots) {
        if (s.chunks.empty()) continue;
        const bool carried = s.end > requests;
        const std::uint64_t first = carried ? 0 : window_of(s.start);
        const std::uint64_t last = carried ? w - 1 : window_of(s.end - 1);
        const auto n = static_cast<std::int64_t>(s.chunks.size());
        live[first] += n;
        live[last + 1] -= n;
        // A range mapped in every window stays mapped across iterations.
        if (first != 0 || last != w - 1) plan.vmm_ops_per_iteration += 2 * s.chunks.size() + 1;
      }
      std::int64_t now = 0;
      for (std::uint64_t i = 0; i < w; ++i) {
        now += live[i];
        plan.mappings = std::max(plan.mappings, static_cast<std::uint64_t>(now));
      }
      break;
    }
  }
}

// Chunk mappings an alias install makes (src/installed_plan.cpp): each used chunk once in the
// pool's view, and every chunk of a range (a slot's chunks, a Dynamic slot's budget) that is
// not one ascending run once more in a view of its own (views shared between such ranges
// not counted).
std::uint64_t install_mappings(const ChunkPlan& plan) {
  std::vector<bool> used(plan.num_chunks, false);
  std::uint64_t mappings = 0;
  for (const PlannedSlot& s : plan.slots) {
    const std::vector<std::uint32_t>& range = s.kind == SlotKind::Dynamic ? s.budget_chunks : s.chunks;
    for (std::uint32_t c : range) {
      mappings += used[c] ? 0 : 1;
      used[c] = true;
    }
    if (!one_ascending_run(range)) mappings += range.size();
  }
  return mappings;
}

DsaSolution solve_checked(const DsaProblem& problem, const DsaOptions& options) {
  DsaSolution solution = solve_dsa(problem, options);
  if (solution.offsets.size() != problem.buffers.size()) {
    throw std::logic_error("offset planner returned " + std::to_string(solution.offsets.size()) +
                           " offsets for " + std::to_string(problem.buffers.size()) + " buffers");
  }
  return solution;
}

ChunkPlan plan_offset_pool(const IterationSlots& in, const PlanOptions& options) {
  const std::uint64_t g = options.granularity;
  ChunkPlan plan;
  plan.mode = PlanMode::Offset;
  plan.slots = in.slots;
  DsaProblem problem;
  std::vector<std::size_t> slot_of;
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    const PlannedSlot& s = plan.slots[i];
    if (s.kind == SlotKind::Dynamic || s.size == 0) continue;
    problem.buffers.push_back({slot_of.size(), s.start, s.end, s.size, options.alignment});
    slot_of.push_back(i);
  }
  const DsaSolution solution = solve_checked(problem, options.dsa);
  std::uint64_t peak = 0;
  for (std::size_t b = 0; b < slot_of.size(); ++b) {
    PlannedSlot& s = plan.slots[slot_of[b]];
    const std::uint64_t x = solution.offsets[b];
    s.offset = x % g;
    for (std::uint64_t k = x / g; k < ceil_div(x + s.size, g); ++k) {
      s.chunks.push_back(static_cast<std::uint32_t>(k));
    }
    peak = std::max(peak, x + s.size);
  }
  plan.num_chunks = ceil_div(peak, g);
  return plan;
}

ChunkPlan plan_chunks(const IterationSlots& in, const PlanOptions& options,
                      RemainderPlacement placement) {
  const std::uint64_t g = options.granularity;
  ChunkPlan plan;
  plan.mode = options.mode;
  plan.remainder = placement;
  plan.slots = in.slots;

  // 1. Split every slot into private chunks and an arena part.
  std::vector<ArenaPart> parts;
  std::vector<ChunkDemand> demands;
  std::vector<std::size_t> private_demand(plan.slots.size(), SIZE_MAX);
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    const PlannedSlot& s = plan.slots[i];
    if (s.kind == SlotKind::Dynamic || s.size == 0) continue;
    const std::uint64_t whole = s.size / g;
    const std::uint64_t tail = s.size % g;
    ArenaPart part{i, tail, options.alignment, whole, false};
    if (s.kind == SlotKind::Small || whole == 0) {
      part.size = s.size;
      part.private_chunks = 0;
    } else if (tail > 0 && placement == RemainderPlacement::Widened) {
      part.size = tail + g;
      part.private_chunks = whole - 1;
    } else if (tail > 0) {
      part.alignment = std::max(options.alignment, g);
      part.boundary_at_start = true;
    }
    if (part.private_chunks > 0) {
      private_demand[i] = demands.size();
      demands.push_back({s.start, s.end, static_cast<std::uint32_t>(part.private_chunks)});
    }
    if (part.size > 0) parts.push_back(part);
  }

  // 2. Lay out the arena.
  DsaProblem problem;
  problem.buffers.reserve(parts.size());
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const PlannedSlot& s = plan.slots[parts[p].slot];
    problem.buffers.push_back({p, s.start, s.end, parts[p].size, parts[p].alignment});
  }
  const DsaSolution solution = solve_checked(problem, options.dsa);

  // 3. Each arena chunk's maximal busy intervals become demands of one chunk.
  std::uint64_t arena_chunks = 0;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    arena_chunks = std::max(arena_chunks, ceil_div(solution.offsets[p] + parts[p].size, g));
  }
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> touching(arena_chunks);
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const PlannedSlot& s = plan.slots[parts[p].slot];
    const std::uint64_t x = solution.offsets[p];
    for (std::uint64_t k = x / g; k < ceil_div(x + parts[p].size, g); ++k) {
      touching[k].emplace_back(s.start, s.end);
    }
  }
  std::vector<ArenaChunkBusy> busy(arena_chunks);
  for (std::uint64_t k = 0; k < arena_chunks; ++k) {
    auto& intervals = touching[k];
    std::sort(intervals.begin(), intervals.end());
    for (const auto& [start, end] : intervals) {
      if (!busy[k].ends.empty() && start <= busy[k].ends.back()) {
        std::uint64_t& merged_end = busy[k].ends.back();
        merged_end = std::max(merged_end, end);
        demands[busy[k].demand.back()].end = merged_end;
      } else {
        busy[k].starts.push_back(start);
        busy[k].ends.push_back(end);
        busy[k].demand.push_back(demands.size());
        demands.push_back({start, end, 1});
      }
    }
    intervals = {};
  }

  // 4. Colour all demands, each slot's in a row where the chunks allow (its range is then one
  // run of consecutive chunks), then give every slot its chunks in address order.
  //
  // The demands that make up part p's range in address order, each with its chunk count:
  // private chunks go in at the first boundary inside [x, x + size]; Widened parts span more
  // than a chunk and Aligned parts start on one, so it exists.
  auto for_each_range_demand = [&](std::size_t p, auto&& f) {
    const ArenaPart& part = parts[p];
    const std::uint64_t start = plan.slots[part.slot].start;
    const std::uint64_t x = solution.offsets[p];
    const std::uint64_t first = x / g;
    const std::uint64_t past = ceil_div(x + part.size, g);
    const std::uint64_t boundary = part.boundary_at_start ? first : ceil_div(x, g);
    const auto private_count = static_cast<std::uint32_t>(part.private_chunks);
    for (std::uint64_t k = first; k < past; ++k) {
      if (k == boundary && private_count > 0) f(private_demand[part.slot], private_count);
      f(busy[k].demand_at(start), 1u);
    }
    if (boundary == past && private_count > 0) f(private_demand[part.slot], private_count);
  };
  std::vector<ChunkAdjacency> adjacent;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    std::size_t previous = SIZE_MAX;
    for_each_range_demand(p, [&](std::size_t demand, std::uint32_t) {
      if (previous != SIZE_MAX) adjacent.push_back({previous, demand});
      previous = demand;
    });
  }
  // Every slot's chunks, in address order, from a colouring, and the Dynamic slots' budgets.
  auto assign = [&](const ChunkColouring& colouring) {
    ChunkPlan out = plan;
    out.num_chunks = colouring.num_chunks;
    out.granularity = g;
    std::vector<bool> has_part(out.slots.size(), false);
    for (std::size_t p = 0; p < parts.size(); ++p) {
      const ArenaPart& part = parts[p];
      has_part[part.slot] = true;
      PlannedSlot& s = out.slots[part.slot];
      s.offset = solution.offsets[p] % g;
      for_each_range_demand(p, [&](std::size_t demand, std::uint32_t count) {
        for (std::uint32_t c : colouring.chunks_of(demand, count)) s.chunks.push_back(c);
      });
    }
    for (std::size_t i = 0; i < out.slots.size(); ++i) {
      if (has_part[i] || private_demand[i] == SIZE_MAX) continue;
      PlannedSlot& s = out.slots[i];
      const auto count = static_cast<std::uint32_t>(s.size / g);
      for (std::uint32_t c : colouring.chunks_of(private_demand[i], count)) s.chunks.push_back(c);
    }
    fill_budgets(out, in.max_size);
    return out;
  };
  ChunkPlan best = assign(colour_chunk_demands(demands, adjacent));
  // Colouring again with the count known gives demands that no released run holds whole new
  // consecutive chunks instead of pieces: kept where the count holds and the install maps
  // fewer chunks (budgets included).
  const ChunkColouring whole = colour_chunk_demands(demands, adjacent, best.num_chunks);
  if (whole.num_chunks == best.num_chunks) {
    ChunkPlan other = assign(whole);
    if (install_mappings(other) < install_mappings(best)) best = std::move(other);
  }
  return best;
}

bool any_split_tail(const IterationSlots& in, std::uint64_t g) {
  return std::any_of(in.slots.begin(), in.slots.end(), [&](const PlannedSlot& s) {
    return s.kind == SlotKind::Static && s.size > g && s.size % g != 0;
  });
}

}  // namespace

bool one_ascending_run(std::span<const std::uint32_t> chunks) {
  const auto not_next = [](std::uint32_t a, std::uint32_t b) { return b != a + 1; };
  return std::adjacent_find(chunks.begin(), chunks.end(), not_next) == chunks.end();
}

double plan_utilization(const ChunkPlan& plan) {
  const std::uint64_t reserved = plan.num_chunks * plan.granularity;
  if (reserved == 0) return 1.0;
  return static_cast<double>(plan.lower_bound_bytes) / static_cast<double>(reserved);
}

ChunkPlan plan_iteration(const Trace& trace, std::uint32_t iteration, const PlanOptions& options) {
  const std::uint64_t g = options.granularity;
  if (g == 0) throw UsageError("granularity must be positive");
  if (options.alignment == 0 || (options.alignment & (options.alignment - 1)) != 0) {
    throw UsageError("alignment must be a power of two, got " + std::to_string(options.alignment));
  }
  if (g % options.alignment != 0) {
    throw UsageError("granularity " + std::to_string(g) + " is not a multiple of the alignment " +
                     std::to_string(options.alignment));
  }
  if (options.mode == PlanMode::Windowed && options.windows == 0) {
    throw UsageError("windowed plans need at least one window");
  }
  const std::uint64_t small = options.small_threshold == 0 ? g : options.small_threshold;
  IterationSlots in = classify_slots(trace, iteration, small, options.plan_one_offs);
  // The planner keeps an entry per chunk of each view: refused before any is made when the
  // views would need more than the limit (a trace of sizes no device has).
  std::uint64_t view_chunks = 0;
  for (const PlannedSlot& s : in.slots) view_chunks += s.size / g + 1;
  if (view_chunks > options.max_view_chunks) {
    throw UsageError("iteration " + std::to_string(iteration) + ": its tensors span " +
                     std::to_string(view_chunks) + " chunks of " + format_bytes(g) +
                     ", more than the planner's limit of " + std::to_string(options.max_view_chunks) +
                     " (PlanOptions::max_view_chunks): a larger granularity, or sizes of a real device");
  }
  // Placed on the timeline that makes slots carried into the next iteration plain intervals.
  const auto lifetimes = rotate_lifetimes(in.slots, in.requests);

  ChunkPlan plan;
  if (options.mode == PlanMode::Offset) {
    plan = plan_offset_pool(in, options);
    plan.granularity = g;
    fill_budgets(plan, in.max_size);
  } else if (options.remainder != RemainderPlacement::Auto || !any_split_tail(in, g)) {
    plan = plan_chunks(in, options, options.remainder == RemainderPlacement::Auto
                                        ? RemainderPlacement::Widened
                                        : options.remainder);
  } else {
    plan = plan_chunks(in, options, RemainderPlacement::Widened);
    ChunkPlan aligned = plan_chunks(in, options, RemainderPlacement::Aligned);
    if (aligned.num_chunks < plan.num_chunks) plan = std::move(aligned);
  }
  plan.granularity = g;
  plan.iteration = iteration;
  plan.signature = signature_of(trace, iteration);
  plan.windows = options.mode == PlanMode::Windowed ? options.windows : 1;
  plan.lower_bound_bytes =
      peak_live_bytes(plan.slots, [](const PlannedSlot& s) { return s.kind != SlotKind::Dynamic; });
  plan.dynamic_peak_bytes =
      peak_live_bytes(plan.slots, [](const PlannedSlot& s) { return s.kind == SlotKind::Dynamic; });
  restore_lifetimes(plan.slots, lifetimes);
  fill_mapping_figures(plan, in.requests);
  return plan;
}

}  // namespace stalloc
