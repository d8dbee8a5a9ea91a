// solve_dsa: persistent buffers stacked at the bottom, the rest cut into time components
// (dsa_components.h); on each component the portfolio of greedy placements (fast, any size),
// then a search below the greedy peak while it is above the target (the capacity, or the lower
// bound when there is no capacity) and time is left. Deterministic for a seed: components and
// portfolio members run in parallel but each winner is chosen by (peak, portfolio index), and
// the search is single-threaded.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "common/error.h"
#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_components.h"
#include "planner/dsa/dsa_conflict_index.h"
#include "planner/dsa/dsa_heuristics.h"
#include "planner/dsa/dsa_search.h"

#ifdef STALLOC_HAVE_TBB
#include <tbb/parallel_for.h>
#endif

namespace stalloc {

namespace {

using Clock = std::chrono::steady_clock;
using namespace dsa_detail;

void check_buffers(const std::vector<DsaBuffer>& buffers) {
  for (const DsaBuffer& b : buffers) {
    if (b.lower > b.upper) {
      throw UsageError("DSA buffer " + std::to_string(b.id) + ": lower " + std::to_string(b.lower) +
                       " is after upper " + std::to_string(b.upper));
    }
    if (!std::has_single_bit(b.alignment)) {
      throw UsageError("DSA buffer " + std::to_string(b.id) + ": alignment " +
                       std::to_string(b.alignment) + " is not a power of two");
    }
  }
}

struct GreedyResult {
  std::vector<std::uint64_t> offsets;
  std::uint64_t peak = 0;
  std::size_t member = 0;
};

// Placing a buffer by the conflict index costs about its number of conflicts (times a log), so
// a portfolio member costs about the sum of all degrees. Above this many, only the sweep-based
// members (start-time order, O(n log n)) run, so that 100,000 buffers take about a second.
constexpr std::uint64_t kConflictWorkLimit = 4'000'000;

GreedyResult run_portfolio(const std::vector<DsaBuffer>& buffers, const DsaConflictIndex& index,
                           bool parallel) {
  const std::vector<PortfolioMember> members = default_portfolio();
  std::uint64_t conflict_work = 0;
  for (std::size_t i = 0; i < buffers.size(); ++i) conflict_work += index.degree(i);
  std::vector<std::size_t> chosen;
  for (std::size_t m = 0; m < members.size(); ++m) {
    if (conflict_work <= kConflictWorkLimit || members[m].ordering == Ordering::StartTime) {
      chosen.push_back(m);
    }
  }
  std::vector<std::vector<std::uint64_t>> offsets(members.size());
  auto run_member = [&](std::size_t c) {
    const PortfolioMember& member = members[chosen[c]];
    const auto order = make_order(buffers, index, member.ordering);
    offsets[chosen[c]] = member.ordering == Ordering::StartTime
                             ? place_by_sweep(buffers, order, member.placement)
                             : place_in_order(buffers, index, order, member.placement);
  };
#ifdef STALLOC_HAVE_TBB
  if (parallel) {
    tbb::parallel_for(std::size_t{0}, chosen.size(), run_member);
  } else {
    for (std::size_t c = 0; c < chosen.size(); ++c) run_member(c);
  }
#else
  (void)parallel;
  for (std::size_t c = 0; c < chosen.size(); ++c) run_member(c);
#endif
  GreedyResult best;
  bool first = true;
  for (std::size_t m : chosen) {
    const std::uint64_t peak = placement_peak(buffers, offsets[m]);
    if (first || peak < best.peak) {
      best.peak = peak;
      best.member = m;
      first = false;
    }
  }
  best.offsets = std::move(offsets[best.member]);
  return best;
}

// The portfolio on each time component of the buffers, in parallel; offsets from 0 per component.
struct ComponentsResult {
  std::vector<std::uint64_t> offsets;
  std::uint64_t peak = 0;
  std::string strategy;
};

ComponentsResult place_components(const std::vector<DsaBuffer>& buffers, bool parallel) {
  const auto components = split_components(buffers);
  std::vector<GreedyResult> results(components.size());
  auto run_component = [&](std::size_t c) {
    std::vector<DsaBuffer> part;
    part.reserve(components[c].size());
    for (std::uint32_t i : components[c]) part.push_back(buffers[i]);
    const DsaConflictIndex index(part);
    results[c] = run_portfolio(part, index, parallel);
  };
#ifdef STALLOC_HAVE_TBB
  if (parallel) {
    tbb::parallel_for(std::size_t{0}, components.size(), run_component);
  } else {
    for (std::size_t c = 0; c < components.size(); ++c) run_component(c);
  }
#else
  for (std::size_t c = 0; c < components.size(); ++c) run_component(c);
#endif
  ComponentsResult out;
  out.offsets.assign(buffers.size(), 0);
  std::size_t highest = 0;
  for (std::size_t c = 0; c < components.size(); ++c) {
    for (std::size_t k = 0; k < components[c].size(); ++k) {
      out.offsets[components[c][k]] = results[c].offsets[k];
    }
    if (results[c].peak > out.peak) {
      out.peak = results[c].peak;
      highest = c;
    }
  }
  out.strategy = member_name(default_portfolio()[results[highest].member]);
  if (components.size() > 1) {
    out.strategy += " (" + std::to_string(components.size()) + " components)";
  }
  return out;
}

}  // namespace

DsaSolution solve_dsa(const DsaProblem& problem, const DsaOptions& options) {
  const auto started = Clock::now();
  check_buffers(problem.buffers);

  // Buffers of no size or no lifetime overlap nothing: offset 0, outside the real problem.
  std::vector<DsaBuffer> active;
  std::vector<std::size_t> active_index;
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const DsaBuffer& b = problem.buffers[i];
    if (b.size > 0 && b.lower < b.upper) {
      active.push_back(b);
      active_index.push_back(i);
    }
  }

  DsaSolution solution;
  solution.lower_bound_bytes = dsa_lower_bound(problem);
  solution.offsets.assign(problem.buffers.size(), 0);
  if (active.empty()) {
    solution.strategy = "empty";
  } else {
    // Persistent buffers stacked at the bottom, most aligned first to waste the least padding.
    std::vector<std::uint32_t> persistent = persistent_buffers(active);
    std::stable_sort(persistent.begin(), persistent.end(), [&](std::uint32_t a, std::uint32_t b) {
      return active[a].alignment > active[b].alignment;
    });
    std::vector<char> is_persistent(active.size(), 0);
    std::uint64_t base = 0;
    for (std::uint32_t i : persistent) {
      const std::uint64_t at = align_up(base, active[i].alignment);
      solution.offsets[active_index[i]] = at;
      base = at + active[i].size;
      is_persistent[i] = 1;
    }
    std::vector<DsaBuffer> rest;
    std::vector<std::size_t> rest_index;
    std::uint64_t rest_alignment = 1;
    for (std::size_t k = 0; k < active.size(); ++k) {
      if (is_persistent[k] != 0) continue;
      rest.push_back(active[k]);
      rest_index.push_back(active_index[k]);
      rest_alignment = std::max(rest_alignment, active[k].alignment);
    }
    solution.peak_bytes = base;
    solution.strategy = "persistent";
    if (!rest.empty()) {
      // Shifting by a multiple of every alignment keeps each offset aligned.
      base = align_up(base, rest_alignment);
      ComponentsResult greedy = place_components(rest, options.parallel);
      std::vector<std::uint64_t> offsets = std::move(greedy.offsets);
      std::uint64_t rest_peak = greedy.peak;
      solution.strategy = std::move(greedy.strategy);

      const std::uint64_t target =
          problem.capacity != 0 ? problem.capacity : solution.lower_bound_bytes;
      const std::uint64_t rest_target = target > base ? target - base : 0;
      if (rest_peak > rest_target && options.time_limit_seconds > 0) {
        // The limit is for the search alone (dsa.h); a million seconds is forever enough and
        // keeps the conversion to clock ticks from overflowing.
        const double seconds = std::min(options.time_limit_seconds, 1e6);
        const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(seconds));
        SearchRequest request{&rest, &offsets, rest_target, deadline, options.seed};
        if (auto found = search_below(request)) {
          offsets = std::move(found->offsets);
          rest_peak = found->peak;
          solution.strategy = "search";
        }
      }
      for (std::size_t k = 0; k < rest.size(); ++k) {
        solution.offsets[rest_index[k]] = base + offsets[k];
      }
      solution.peak_bytes = base + rest_peak;
    }
  }
  solution.within_capacity = problem.capacity == 0 || solution.peak_bytes <= problem.capacity;
  solution.milliseconds = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  return solution;
}

}  // namespace stalloc
