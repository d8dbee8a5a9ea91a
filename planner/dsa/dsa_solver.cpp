// solve_dsa: persistent buffers stacked at the bottom, the rest cut into time components
// (dsa_components.h); on each component the portfolio of greedy placements, then, while the
// peak is above the target (the capacity, or the lower bound when there is no capacity) and
// time is left, the searches on whichever component makes the peak, until it is no higher than
// the next highest one (or than what some component is proved unable to go below):
//
// - the exact search (dsa_search.h) on one worker, for components of up to 20,000 buffers;
// - the order search (dsa_order_search.h) and the window search (dsa_window_search.h) on the
//   other workers (oneTBB), each from the best placement so far with its own seed, in rounds of
//   a quarter of the remaining time (at least half a second): after each round all restart
//   from the best. All share the best peak found, so they stop together at the goal.
//
// With a work limit (DsaOptions::work_limit) the schedule is fixed instead, so that the result
// depends on the work alone: on each component the exact search first, alone, with half of the
// component's share of the work, then (unless it reached the goal) the order and window searches
// on three workers in rounds of a quarter of the work left, each worker with its own part of the
// round's work and none stopping another; the best of a round is chosen by (peak, worker index).
// The workers of a round run in parallel when options.parallel is set, one after the other
// otherwise: the same placements either way.
//
// Alongside, plain best-fit-decreasing on the whole problem: the result is never worse than it.
// Components and portfolio members run in parallel, but each winner is chosen by (peak,
// portfolio index), so the portfolio's result does not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_components.h"
#include "planner/dsa/dsa_conflict_index.h"
#include "planner/dsa/dsa_heuristics.h"
#include "planner/dsa/dsa_order_search.h"
#include "planner/dsa/dsa_search.h"
#include "planner/dsa/dsa_window_search.h"

#ifdef STALLOC_HAVE_TBB
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_group.h>
#include <tbb/info.h>
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

template <typename Body>
void for_each_index(std::size_t count, bool parallel, Body&& body) {
#ifdef STALLOC_HAVE_TBB
  if (parallel) {
    tbb::parallel_for(std::size_t{0}, count, body);
    return;
  }
#else
  (void)parallel;
#endif
  for (std::size_t k = 0; k < count; ++k) body(k);
}

struct GreedyResult {
  std::vector<std::uint64_t> offsets;
  std::uint64_t peak = 0;
  std::size_t member = 0;
};

// With time limit 0, a member placed through the conflict index costs about the sum of all
// conflict counts; above this many only the sweep members run (as before the occupancy tree:
// the chunk planner's arenas stay fast).
constexpr std::uint64_t kConflictWorkLimit = 4'000'000;
// With a time limit, components up to this size get all ten members (about 50 ms each at
// 10,000 irregular buffers); larger ones four: size order with both rules (best fit is the
// baseline; lowest offset wins most often on large irregular instances) and the two sweeps
// (about 1 to 3 s each at 100,000 irregular buffers for the first two, 0.1 s for the sweeps).
constexpr std::size_t kFullPortfolioBuffers = 20000;

bool in_reduced_portfolio(const PortfolioMember& m) {
  return m.ordering == Ordering::StartTime || m.ordering == Ordering::SizeDesc;
}

// With a time limit every member but the start-time sweeps (O(n log n), never cut, so that a
// placement always exists) gives up at the deadline; `cut` counts those that did.
GreedyResult run_portfolio(const std::vector<DsaBuffer>& buffers, bool with_time, bool parallel,
                           Clock::time_point deadline, std::atomic<std::uint64_t>* cut) {
  const std::vector<PortfolioMember> members = default_portfolio();
  std::vector<std::size_t> chosen;
  std::uint64_t conflict_work = 0;
  const DsaConflictIndex index(buffers);  // for the conflict-degree order
  if (!with_time) {
    for (std::size_t i = 0; i < buffers.size(); ++i) conflict_work += index.degree(i);
  }
  for (std::size_t m = 0; m < members.size(); ++m) {
    const bool take = with_time ? buffers.size() <= kFullPortfolioBuffers ||
                                      in_reduced_portfolio(members[m])
                                : conflict_work <= kConflictWorkLimit ||
                                      members[m].ordering == Ordering::StartTime;
    if (take) chosen.push_back(m);
  }
  std::vector<std::vector<std::uint64_t>> offsets(members.size());
  for_each_index(chosen.size(), parallel, [&](std::size_t c) {
    const PortfolioMember& member = members[chosen[c]];
    const auto order = make_order(buffers, index, member.ordering);
    offsets[chosen[c]] = member.ordering == Ordering::StartTime
                             ? place_by_sweep(buffers, order, member.placement)
                             : place_in_order(buffers, order, member.placement, nullptr, deadline);
    if (offsets[chosen[c]].size() != buffers.size()) ++*cut;
  });
  GreedyResult best;
  bool first = true;
  for (std::size_t m : chosen) {
    if (offsets[m].size() != buffers.size()) continue;
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

// One time component: its buffers (local indices), its placement from offset 0, and what is
// known about how low it can go.
struct Component {
  std::vector<std::uint32_t> members;  // indices into the solver's rest
  std::vector<DsaBuffer> buffers;
  std::vector<std::uint64_t> offsets;
  std::uint64_t peak = 0;
  std::uint64_t bound = 0;  // no placement is lower: its lower bound, or what the search refuted
  bool proved = false;      // the search refuted every peak below this one
  std::string strategy;
};

std::size_t worker_count(bool parallel) {
#ifdef STALLOC_HAVE_TBB
  if (parallel) {
    return std::clamp<std::size_t>(static_cast<std::size_t>(tbb::info::default_concurrency()), 1,
                                   8);
  }
#endif
  (void)parallel;
  return 1;
}

// Which search worker w runs in a round: two in three run the order search (the stronger on
// every irregular instance measured), one the window search.
bool orders(std::size_t w, std::uint64_t round) { return (w + round) % 3 != 2; }

// With a work limit: the order and window search workers of a round, whatever the machine's
// cores (two order searches and one window search per round, as orders() deals them).
constexpr std::size_t kWorkScheduleWorkers = 3;
// With a work limit, the least work of a round, per worker, in orders of the whole component
// (the time schedule's rounds last at least half a second for the same reason: a restart from
// the best placement costs a fresh start of each search).
constexpr std::uint64_t kMinRoundOrders = 4;

// The order and window searches by `workers` workers, in rounds, from `start` until its peak is
// at most goal, the shared best is, or the deadline. With work != 0 the rounds are cut by work
// instead of time (a quarter of what is left each, at least kMinRoundOrders orders per worker),
// the workers share nothing while a round runs, and the work done is added to *used. Returns
// the best placement and its peak.
std::pair<std::vector<std::uint64_t>, std::uint64_t> heuristic_search(
    const Component& c, const DsaConflictIndex& index, std::vector<std::uint64_t> best,
    std::uint64_t best_peak, std::uint64_t goal, Clock::time_point deadline, std::uint64_t seed,
    std::size_t workers, bool parallel, std::atomic<std::uint64_t>& shared_best,
    std::string* strategy, std::uint64_t work, std::uint64_t* used) {
  const std::uint64_t at_start = *used;
  for (std::uint64_t round = 0; best_peak > goal; ++round) {
    const auto now = Clock::now();
    if (now >= deadline || shared_best.load(std::memory_order_relaxed) <= goal) break;
    Clock::time_point round_end = deadline;
    std::uint64_t allowance = 0;  // per worker, with a work limit
    if (work != 0) {
      const std::uint64_t left = work - (*used - at_start);
      const std::uint64_t least = kMinRoundOrders * c.buffers.size() * workers;
      allowance = std::min(left, std::max(left / 4, least)) / workers;
      if (allowance == 0) break;
    } else {
      const auto length =
          std::max<Clock::duration>((deadline - now) / 4, std::chrono::milliseconds(500));
      round_end = std::min(deadline, now + length);
    }
    std::atomic<std::uint64_t>* shared = work != 0 ? nullptr : &shared_best;
    std::vector<std::vector<std::uint64_t>> offsets(workers);
    std::vector<std::uint64_t> peaks(workers, UINT64_MAX);
    std::vector<std::uint64_t> done(workers, 0);
    for_each_index(workers, parallel, [&](std::size_t w) {
      const std::uint64_t worker_seed = seed * 1000003 + round * workers + w;
      if (orders(w, round)) {
        OrderSearchRequest request;
        request.buffers = &c.buffers;
        request.index = &index;
        request.incumbent = &best;
        request.target = goal;
        request.deadline = round_end;
        request.seed = worker_seed;
        request.shared_best = shared;
        request.work_limit = allowance;
        OrderSearchResult r = improve_by_orders(request);
        offsets[w] = std::move(r.offsets);
        peaks[w] = r.peak;
        done[w] = r.work;
      } else {
        WindowSearchRequest request;
        request.buffers = &c.buffers;
        request.index = &index;
        request.incumbent = &best;
        request.target = goal;
        request.deadline = round_end;
        request.seed = worker_seed;
        request.shared_best = shared;
        request.work_limit = allowance;
        WindowSearchResult r = improve_by_windows(request);
        offsets[w] = std::move(r.offsets);
        peaks[w] = r.peak;
        done[w] = r.work;
      }
    });
    std::uint64_t round_work = 0;
    for (std::size_t w = 0; w < workers; ++w) {
      round_work += done[w];
      if (peaks[w] < best_peak) {
        best_peak = peaks[w];
        best = std::move(offsets[w]);
        *strategy = orders(w, round) ? "order-search" : "window-search";
      }
    }
    *used += round_work;
    // Nothing fitted in the allowance: every later round would be the same.
    if (work != 0 && round_work == 0) break;
  }
  return {std::move(best), best_peak};
}

// All the searches on one component. A component small enough for the exact search gets it on
// one worker and the order and window searches on the others, all aiming at the floor (the
// final target) until `share` (its share of the time): the exact search is worth the most when
// it is not interrupted (on MiniMalloc H, restarted each time the others reached an intermediate
// goal, it missed the capacity after 20 s on a loaded machine; uninterrupted, 1.7 s). With one
// worker, the exact search first for half the share. A larger component gets the order and
// window searches on every worker until its peak is at most goal (the next lower component
// peak) or the deadline. A proof that the exact search's peak is optimal stops the others.
// With work != 0 (the component's share of the work limit) the schedule is the fixed one of the
// work limit (see the top of this file) and share is not used. Returns the work done.
std::uint64_t search_component(Component& c, std::uint64_t goal, std::uint64_t floor,
                               Clock::time_point share, Clock::time_point deadline,
                               std::uint64_t seed, bool parallel, std::uint64_t work) {
  const std::vector<std::uint64_t> start = c.offsets;
  const std::uint64_t start_peak = c.peak;
  std::atomic<std::uint64_t> shared_best{c.peak};
  const DsaConflictIndex index(c.buffers);
  const std::size_t workers = work != 0 ? kWorkScheduleWorkers : worker_count(parallel);
  bool exact = c.buffers.size() <= kExactSearchMaxBuffers;
  if (exact) {
    std::uint64_t pairs = 0;
    for (std::size_t i = 0; i < c.buffers.size(); ++i) pairs += index.degree(i);
    exact = pairs <= kExactSearchMaxPairs;
  }
  const std::uint64_t aim = exact ? floor : goal;
  const Clock::time_point until = exact && work == 0 ? share : deadline;
  SearchResult found;
  auto run_exact = [&](Clock::time_point end, std::uint64_t exact_work) {
    SearchRequest request{&c.buffers, &start, floor, end, seed, &shared_best, exact_work};
    found = search_below(request);
    if (found.proved_optimal) {
      std::uint64_t seen = shared_best.load();
      while (seen > aim && !shared_best.compare_exchange_weak(seen, aim)) {
      }
    }
  };
  std::string heuristic_strategy;
  std::pair<std::vector<std::uint64_t>, std::uint64_t> heuristic{start, start_peak};
  std::uint64_t heuristic_work = 0;
  auto run_heuristics = [&](std::size_t count, std::uint64_t allowance) {
    heuristic = heuristic_search(c, index, start, start_peak, aim, until, seed, count, parallel,
                                 shared_best, &heuristic_strategy, allowance, &heuristic_work);
  };
  if (work != 0) {
    if (exact) run_exact(deadline, std::max<std::uint64_t>(1, work / 2));
    if (!exact || !found.reached_target) {
      const std::uint64_t left = work - std::min(work, found.work);
      if (left > 0) run_heuristics(workers, left);
    }
  } else
#ifdef STALLOC_HAVE_TBB
  if (exact && workers >= 2) {
    tbb::task_group group;
    group.run([&] { run_exact(until, 0); });
    run_heuristics(workers - 1, 0);
    group.wait();
  } else
#endif
  {
    if (exact) run_exact(Clock::now() + (until - std::min(until, Clock::now())) / 2, 0);
    if (!exact || !found.reached_target) run_heuristics(workers, 0);
  }
  if (exact && found.searched && found.peak < c.peak) {
    c.offsets = std::move(found.offsets);
    c.peak = found.peak;
    c.strategy = "search";
  }
  if (heuristic.second < c.peak) {
    c.offsets = std::move(heuristic.first);
    c.peak = heuristic.second;
    c.strategy = heuristic_strategy;
  }
  c.bound = std::max(c.bound, found.refuted_below);
  if (found.proved_optimal && c.peak == found.peak) {
    c.bound = std::max(c.bound, c.peak);
    c.proved = true;
  }
  return found.work + heuristic_work;
}

}  // namespace

std::string dsa_stop_name(DsaStop stop) {
  switch (stop) {
    case DsaStop::LowerBound:
      return "lower-bound";
    case DsaStop::Capacity:
      return "capacity";
    case DsaStop::ProvedOptimal:
      return "proved-optimal";
    case DsaStop::TimeLimit:
      return "time-limit";
    case DsaStop::WorkLimit:
      return "work-limit";
    case DsaStop::NoSearch:
      return "no-search";
  }
  return "?";
}

DsaSolution best_fit_decreasing(const DsaProblem& problem, Clock::time_point deadline) {
  const auto started = Clock::now();
  check_buffers(problem.buffers);
  DsaSolution solution;
  solution.lower_bound_bytes = dsa_lower_bound(problem);
  solution.offsets.assign(problem.buffers.size(), 0);
  std::vector<DsaBuffer> active;
  std::vector<std::size_t> active_index;
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const DsaBuffer& b = problem.buffers[i];
    if (b.size > 0 && b.lower < b.upper) {
      active.push_back(b);
      active_index.push_back(i);
    }
  }
  std::vector<std::uint32_t> order(active.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (active[a].size != active[b].size) return active[a].size > active[b].size;
    const std::uint64_t la = active[a].upper - active[a].lower;
    const std::uint64_t lb = active[b].upper - active[b].lower;
    return la != lb ? la > lb : a < b;
  });
  const auto offsets = place_in_order(active, order, Placement::BestFit, nullptr, deadline);
  if (offsets.size() != active.size()) {
    solution.offsets.clear();
    solution.strategy = "best-fit-decreasing (cut by the time limit)";
    solution.stop = DsaStop::TimeLimit;
    solution.cut_by_time_limit = 1;
    solution.milliseconds = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    return solution;
  }
  for (std::size_t k = 0; k < active.size(); ++k) solution.offsets[active_index[k]] = offsets[k];
  solution.peak_bytes = placement_peak(active, offsets);
  solution.within_capacity = problem.capacity == 0 || solution.peak_bytes <= problem.capacity;
  solution.strategy = "best-fit-decreasing";
  solution.greedy_peak_bytes = solution.peak_bytes;
  solution.best_fit_decreasing_peak_bytes = solution.peak_bytes;
  solution.stop =
      solution.peak_bytes == solution.lower_bound_bytes ? DsaStop::LowerBound : DsaStop::NoSearch;
  solution.milliseconds = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  return solution;
}

DsaSolution solve_dsa(const DsaProblem& problem, const DsaOptions& options) {
  const auto started = Clock::now();
  check_buffers(problem.buffers);
  // A million seconds is forever enough and keeps the conversion to clock ticks from overflowing.
  const double seconds = std::clamp(options.time_limit_seconds, 0.0, 1e6);
  const bool with_time = seconds > 0;
  const std::uint64_t work_limit = options.work_limit;
  const bool with_work = work_limit != 0;
  const bool searching = with_time || with_work;
  const auto deadline =
      with_time ? started + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(seconds))
                : Clock::time_point::max();
  std::uint64_t work_used = 0;
  bool out_of_work = false;
  std::atomic<std::uint64_t> cut{0};  // heuristics the time limit cut short

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
  const std::uint64_t target =
      problem.capacity != 0 ? problem.capacity : solution.lower_bound_bytes;
  // Why the search ended, when the rest reached what it could not go below: its lower bound
  // (up to the alignment padding above the persistent stack), or a proved optimum.
  bool rest_at_bound = false;
  bool proved = false;

  // The baseline, on the whole problem: with a time limit always, else only when cheap.
  DsaSolution baseline;
  const bool run_baseline = searching || active.size() <= 4000;
#ifdef STALLOC_HAVE_TBB
  tbb::task_group background;
  if (run_baseline && options.parallel) {
    background.run([&] { baseline = best_fit_decreasing(problem, deadline); });
  } else if (run_baseline) {
    baseline = best_fit_decreasing(problem, deadline);
  }
#else
  if (run_baseline) baseline = best_fit_decreasing(problem, deadline);
#endif

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
    solution.greedy_peak_bytes = base;
    solution.strategy = "persistent";
    if (!rest.empty()) {
      // Shifting by a multiple of every alignment keeps each offset aligned.
      base = align_up(base, rest_alignment);
      const std::uint64_t rest_target = target > base ? target - base : 0;

      // The portfolio on each component, in parallel.
      const auto groups = split_components(rest);
      std::vector<Component> components(groups.size());
      for_each_index(groups.size(), options.parallel, [&](std::size_t g) {
        Component& c = components[g];
        c.members = groups[g];
        for (std::uint32_t i : c.members) c.buffers.push_back(rest[i]);
        GreedyResult greedy = run_portfolio(c.buffers, searching, options.parallel, deadline, &cut);
        c.offsets = std::move(greedy.offsets);
        c.peak = greedy.peak;
        c.strategy = member_name(default_portfolio()[greedy.member]);
        DsaProblem part;
        part.buffers = c.buffers;
        c.bound = dsa_lower_bound(part);
      });
      auto rest_peak = [&] {
        std::uint64_t peak = 0;
        for (const Component& c : components) peak = std::max(peak, c.peak);
        return peak;
      };
      solution.greedy_peak_bytes = base + rest_peak();
      // Below the highest bound, no component needs to go.
      auto floor = [&] {
        std::uint64_t f = rest_target;
        for (const Component& c : components) f = std::max(f, c.bound);
        return f;
      };

      // The searches on the component that makes the peak, until it is down to the next one
      // (or the floor), then on the next.
      while (searching && Clock::now() < deadline) {
        if (with_work && work_used >= work_limit) {
          out_of_work = true;
          break;
        }
        std::size_t highest = 0;
        std::uint64_t second = 0;
        for (std::size_t g = 0; g < components.size(); ++g) {
          if (components[g].peak > components[highest].peak) highest = g;
        }
        // The next peak below it: components tied with it must come down too, in turn.
        for (std::size_t g = 0; g < components.size(); ++g) {
          if (components[g].peak < components[highest].peak) {
            second = std::max(second, components[g].peak);
          }
        }
        Component& c = components[highest];
        const std::uint64_t goal = std::max({floor(), second, c.bound});
        if (c.peak <= goal) break;
        // Each component above the floor gets an equal share of the time left for the exact
        // search; the hardest (highest) comes first.
        std::size_t above = 0;
        for (const Component& other : components) above += other.peak > floor() ? 1 : 0;
        above = std::max<std::size_t>(above, 1);
        const auto now = Clock::now();
        const auto share = with_work ? deadline : now + (deadline - now) / static_cast<long>(above);
        const std::uint64_t work_share =
            with_work ? std::max<std::uint64_t>(1, (work_limit - work_used) / above) : 0;
        const std::uint64_t done = search_component(c, goal, floor(), share, deadline,
                                                    options.seed + highest, options.parallel,
                                                    work_share);
        work_used += done;
        if (with_work && done == 0) {  // nothing fitted in the share: the next pass would repeat
          out_of_work = true;
          break;
        }
      }

      const std::uint64_t peak = rest_peak();
      std::size_t highest = 0;
      for (std::size_t g = 0; g < components.size(); ++g) {
        const Component& c = components[g];
        for (std::size_t k = 0; k < c.members.size(); ++k) {
          solution.offsets[rest_index[c.members[k]]] = base + c.offsets[k];
        }
        if (c.peak > components[highest].peak) highest = g;
      }
      solution.peak_bytes = base + peak;
      rest_at_bound = peak <= floor();
      proved = rest_at_bound && components[highest].proved;
      solution.strategy = components[highest].strategy;
      if (components.size() > 1) {
        solution.strategy += " (" + std::to_string(components.size()) + " components)";
      }
    }
  }
#ifdef STALLOC_HAVE_TBB
  background.wait();
#endif
  if (run_baseline && baseline.offsets.size() != problem.buffers.size()) {
    ++cut;
  } else if (run_baseline) {
    solution.best_fit_decreasing_peak_bytes = baseline.peak_bytes;
    if (baseline.peak_bytes < solution.peak_bytes) {
      solution.offsets = std::move(baseline.offsets);
      solution.peak_bytes = baseline.peak_bytes;
      solution.strategy = baseline.strategy;
      rest_at_bound = proved = false;
    }
    solution.greedy_peak_bytes = std::min(solution.greedy_peak_bytes, baseline.peak_bytes);
  }
  solution.within_capacity = problem.capacity == 0 || solution.peak_bytes <= problem.capacity;
  if (solution.peak_bytes <= solution.lower_bound_bytes) {
    solution.stop = DsaStop::LowerBound;
  } else if (problem.capacity != 0 && solution.within_capacity) {
    solution.stop = DsaStop::Capacity;
  } else if (proved) {
    solution.stop = DsaStop::ProvedOptimal;
  } else if (rest_at_bound) {
    solution.stop = DsaStop::LowerBound;
  } else if (out_of_work) {
    solution.stop = DsaStop::WorkLimit;
  } else {
    solution.stop = with_time ? DsaStop::TimeLimit
                    : with_work ? DsaStop::WorkLimit
                                : DsaStop::NoSearch;
  }
  solution.work = work_used;
  solution.cut_by_time_limit = cut;
  solution.milliseconds = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  return solution;
}

}  // namespace stalloc
