// Sweeps each chunk's uses in time order, keeping the live byte ranges of that chunk in an
// ordered map: a new use can only collide with its neighbours there, so the check is
// O(U log U) for U (slot, chunk) uses instead of comparing all pairs.
#include "planner/chunk/plan_validator.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <sstream>
#include <tuple>

namespace stalloc {

namespace {

constexpr std::size_t kMaxErrors = 20;

struct ChunkUse {
  std::uint64_t chunk = 0;
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::uint64_t lo = 0;  // bytes [lo, hi) of the chunk
  std::uint64_t hi = 0;
  std::size_t slot = 0;
};

struct BusyInterval {
  std::uint64_t chunk = 0;
  std::uint64_t start = 0;
  std::uint64_t end = 0;
};

class Findings {
 public:
  explicit Findings(PlanValidation* v) : v_(v) {}
  template <typename... Parts>
  void add(const Parts&... parts) {
    v_->ok = false;
    if (v_->errors.size() >= kMaxErrors) return;
    std::ostringstream out;
    (out << ... << parts);
    v_->errors.push_back(out.str());
  }

 private:
  PlanValidation* v_;
};

// A slot's lifetime on the iteration's timeline: [start, end), or for a slot carried into the
// next iteration (end past the requests) [start, requests) and [0, end - requests).
std::vector<std::pair<std::uint64_t, std::uint64_t>> live_intervals(const PlannedSlot& s,
                                                                    std::uint64_t requests) {
  if (s.end <= requests) return {{s.start, s.end}};
  return {{s.start, requests}, {0, s.end - requests}};
}

void check_slot_shapes(const ChunkPlan& plan, Findings& findings) {
  const std::uint64_t g = plan.granularity;
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    const PlannedSlot& s = plan.slots[i];
    if (i > 0 && s.ordinal <= plan.slots[i - 1].ordinal) {
      findings.add("slot ", i, ": ordinal ", s.ordinal, " does not follow ", plan.slots[i - 1].ordinal);
    }
    const std::uint64_t requests = plan.signature.requests;
    if (s.start >= s.end || s.start >= requests || (s.end > requests && s.end - requests > s.start)) {
      findings.add("slot ", s.ordinal, ": lifetime [", s.start, ", ", s.end,
                   ") is not inside the iteration's ", requests,
                   " requests, nor carried into the next without meeting its next instance");
    }
    for (std::uint32_t c : s.chunks) {
      if (c >= plan.num_chunks) {
        findings.add("slot ", s.ordinal, ": chunk ", c, " is not below num_chunks ", plan.num_chunks);
      }
    }
    for (std::uint32_t c : s.budget_chunks) {
      if (c >= plan.num_chunks) {
        findings.add("slot ", s.ordinal, ": budget chunk ", c, " is not below num_chunks ",
                     plan.num_chunks);
      }
    }
    if (s.kind == SlotKind::Dynamic) {
      if (!s.chunks.empty()) findings.add("dynamic slot ", s.ordinal, " has planned chunks");
      continue;
    }
    if (!s.budget_chunks.empty()) findings.add("slot ", s.ordinal, " is not dynamic but has a budget");
    if (s.offset >= g) findings.add("slot ", s.ordinal, ": offset ", s.offset, " is not below ", g);
    const std::uint64_t expected = (s.offset + s.size + g - 1) / g;
    if (s.chunks.size() != expected) {
      findings.add("slot ", s.ordinal, ": ", s.chunks.size(), " chunks, its range needs ", expected);
    }
  }
}

std::vector<ChunkUse> chunk_uses(const ChunkPlan& plan) {
  const std::uint64_t g = plan.granularity;
  std::vector<ChunkUse> uses;
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    const PlannedSlot& s = plan.slots[i];
    if (s.kind == SlotKind::Dynamic) continue;
    for (std::size_t j = 0; j < s.chunks.size(); ++j) {
      if (s.chunks[j] >= plan.num_chunks) continue;
      const std::uint64_t range_lo = j * g;
      const std::uint64_t lo = std::max(s.offset, range_lo);
      const std::uint64_t hi = std::min(s.offset + s.size, range_lo + g);
      if (lo >= hi) continue;
      for (const auto& [start, end] : live_intervals(s, plan.signature.requests)) {
        uses.push_back({s.chunks[j], start, end, lo - range_lo, hi - range_lo, i});
      }
    }
  }
  std::sort(uses.begin(), uses.end(), [](const ChunkUse& a, const ChunkUse& b) {
    return std::tie(a.chunk, a.start) < std::tie(b.chunk, b.start);
  });
  return uses;
}

// Checks byte overlaps of one chunk's uses [first, last) and appends the chunk's merged busy
// intervals.
void sweep_chunk(const ChunkPlan& plan, const std::vector<ChunkUse>& uses, std::size_t first,
                 std::size_t last, Findings& findings, std::vector<BusyInterval>* busy) {
  std::map<std::uint64_t, const ChunkUse*> live;  // by lo; the ranges are disjoint
  using Ending = std::pair<std::uint64_t, std::uint64_t>;  // (end, lo)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<>> endings;
  for (std::size_t u = first; u < last; ++u) {
    const ChunkUse& use = uses[u];
    while (!endings.empty() && endings.top().first <= use.start) {
      live.erase(endings.top().second);
      endings.pop();
    }
    auto next = live.lower_bound(use.lo);
    const ChunkUse* clash = nullptr;
    if (next != live.end() && next->second->lo < use.hi) clash = next->second;
    if (next != live.begin() && std::prev(next)->second->hi > use.lo) clash = std::prev(next)->second;
    if (clash != nullptr) {
      findings.add("slots ", plan.slots[clash->slot].ordinal, " and ",
                   plan.slots[use.slot].ordinal, " are live together and overlap in chunk ",
                   use.chunk, " (bytes [", clash->lo, ", ", clash->hi, ") and [", use.lo, ", ",
                   use.hi, "))");
    } else {
      live.emplace(use.lo, &use);
      endings.emplace(use.end, use.lo);
    }
    if (!busy->empty() && busy->back().chunk == use.chunk && use.start <= busy->back().end) {
      busy->back().end = std::max(busy->back().end, use.end);
    } else {
      busy->push_back({use.chunk, use.start, use.end});
    }
  }
}

std::uint64_t peak_concurrent(const std::vector<BusyInterval>& busy) {
  std::vector<std::pair<std::uint64_t, int>> steps;
  for (const BusyInterval& b : busy) {
    steps.emplace_back(b.start, 1);
    steps.emplace_back(b.end, -1);
  }
  std::sort(steps.begin(), steps.end());
  std::int64_t now = 0, peak = 0;
  for (const auto& [t, d] : steps) {
    now += d;
    peak = std::max(peak, now);
  }
  return static_cast<std::uint64_t>(peak);
}

std::uint64_t recompute_lower_bound(const ChunkPlan& plan) {
  std::vector<std::pair<std::uint64_t, std::int64_t>> steps;
  for (const PlannedSlot& s : plan.slots) {
    if (s.kind == SlotKind::Dynamic) continue;
    for (const auto& [start, end] : live_intervals(s, plan.signature.requests)) {
      steps.emplace_back(start, static_cast<std::int64_t>(s.size));
      steps.emplace_back(end, -static_cast<std::int64_t>(s.size));
    }
  }
  std::sort(steps.begin(), steps.end());
  std::int64_t now = 0, peak = 0;
  for (const auto& [t, d] : steps) {
    now += d;
    peak = std::max(peak, now);
  }
  return static_cast<std::uint64_t>(peak);
}

void check_budgets(const ChunkPlan& plan, const std::vector<BusyInterval>& busy,
                   Findings& findings) {
  for (const PlannedSlot& s : plan.slots) {
    for (std::uint32_t c : s.budget_chunks) {
      for (const auto& [start, end] : live_intervals(s, plan.signature.requests)) {
        // Busy intervals are sorted by (chunk, start) and disjoint within a chunk.
        auto it = std::lower_bound(busy.begin(), busy.end(), std::make_pair(std::uint64_t{c}, start),
                                   [](const BusyInterval& b, const std::pair<std::uint64_t, std::uint64_t>& key) {
                                     return std::tie(b.chunk, b.end) <= std::tie(key.first, key.second);
                                   });
        if (it != busy.end() && it->chunk == c && it->start < end) {
          findings.add("dynamic slot ", s.ordinal, ": budget chunk ", c, " is busy over [",
                       it->start, ", ", it->end, ") inside its lifetime [", s.start, ", ", s.end, ")");
        }
      }
    }
  }
}

}  // namespace

PlanValidation validate_plan(const ChunkPlan& plan) {
  PlanValidation v;
  Findings findings(&v);
  if (plan.granularity == 0) {
    findings.add("granularity is 0");
    return v;
  }
  check_slot_shapes(plan, findings);

  const std::vector<ChunkUse> uses = chunk_uses(plan);
  std::vector<BusyInterval> busy;
  for (std::size_t first = 0; first < uses.size();) {
    std::size_t last = first;
    while (last < uses.size() && uses[last].chunk == uses[first].chunk) ++last;
    sweep_chunk(plan, uses, first, last, findings, &busy);
    first = last;
  }
  check_budgets(plan, busy, findings);

  v.peak_chunks_in_use = peak_concurrent(busy);
  v.peak_physical_bytes = v.peak_chunks_in_use * plan.granularity;
  v.lower_bound_bytes = recompute_lower_bound(plan);
  if (v.lower_bound_bytes != plan.lower_bound_bytes) {
    findings.add("lower_bound_bytes is ", plan.lower_bound_bytes, ", the slots give ",
                 v.lower_bound_bytes);
  }
  if (plan.mode == PlanMode::Alias) {
    std::uint64_t mappings = 0;
    for (const PlannedSlot& s : plan.slots) mappings += s.chunks.size();
    if (mappings != plan.mappings) {
      findings.add("mappings is ", plan.mappings, ", the slots map ", mappings, " chunks");
    }
  } else if (plan.mode == PlanMode::Offset && plan.mappings != plan.num_chunks) {
    findings.add("an offset plan maps its ", plan.num_chunks, " pool chunks once, mappings says ",
                 plan.mappings);
  }
  return v;
}

}  // namespace stalloc
