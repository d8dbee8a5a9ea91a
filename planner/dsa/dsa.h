// The offset (dynamic storage allocation) problem: buffers with a lifetime [lower, upper) and a
// size get offsets so that no two buffers live at the same time overlap, with the peak
// (max offset + size) as small as possible. Used for MiniMalloc-style CSV problems, for the
// paper's single-pool plan (--mode offset), and for packing small tensors and chunk tails in the
// physical-chunk planner.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace stalloc {

struct DsaBuffer {
  std::uint64_t id = 0;
  std::uint64_t lower = 0;  // first time the buffer is live
  std::uint64_t upper = 0;  // first time it is dead again (half-open)
  std::uint64_t size = 0;
  std::uint64_t alignment = 1;  // offset must be a multiple of this (a power of two)
};

struct DsaProblem {
  std::vector<DsaBuffer> buffers;
  std::uint64_t capacity = 0;  // 0: no capacity, minimise the peak only
};

struct DsaOptions {
  // Wall-clock seconds for the whole call, counted from its start. The greedy portfolio and the
  // baseline give up at the limit but for the start-time sweeps (O(n log n)), which always
  // complete: a limit shorter than they take is exceeded; the search then improves the
  // placement until the limit, and stops earlier only when the peak reaches the lower bound
  // (or the capacity, when one is given) or an exact search proves it optimal. 0: no time limit
  // when work_limit is set; else the portfolio only, with its cheaper members alone on large
  // components (the physical-chunk planner's setting).
  double time_limit_seconds = 10.0;
  // The searches' budget in buffer placements, summed over every search of the call: a node of
  // the exact search places one buffer, an order of the order search places every buffer of its
  // component, a window of the window search re-places the buffers it lifts and inserts the
  // fixed ones around them. 0: none (the time limit alone bounds the search). Counted, not
  // timed, so it means the same on a loaded or a faster machine.
  //
  // With a work limit the searches run on a schedule that depends on nothing but the problem,
  // the seed and the limit: the exact search first with half of each component's share, then
  // the order and window searches in rounds of three workers (on oneTBB when parallel, else one
  // after the other) that do not stop one another, each round's best chosen by (peak, worker).
  // So with a work limit and time limit 0 the result (offsets, peak, strategy, stop, work) is
  // the same on every run, for every thread count and machine load. With a time limit it is
  // that same result unless the time runs out first.
  std::uint64_t work_limit = 0;
  // With time_limit_seconds == 0 and no work limit the result is deterministic for a seed. With
  // a time limit alone it depends on how far the search got: the same seed on a faster or less
  // loaded machine may end lower.
  std::uint64_t seed = 1;
  bool parallel = true;  // portfolio members, components and search workers on oneTBB
};

// Why solve_dsa returned.
enum class DsaStop {
  LowerBound,     // the peak equals the lower bound: nothing can be better (or, with aligned
                  // persistent buffers, exceeds it by at most the padding above their stack)
  Capacity,       // the peak is within the capacity asked for
  ProvedOptimal,  // the exact search refuted every lower peak (small components)
  TimeLimit,      // the time limit ran out first
  WorkLimit,      // the work limit ran out first
  NoSearch,       // time limit 0 and no work limit: the portfolio only
};

std::string dsa_stop_name(DsaStop stop);  // "lower-bound", "capacity", "proved-optimal", ...

struct DsaSolution {
  std::vector<std::uint64_t> offsets;   // parallel to problem.buffers
  std::uint64_t peak_bytes = 0;         // max over buffers of offset + size
  std::uint64_t lower_bound_bytes = 0;  // max over time of live bytes
  bool within_capacity = true;          // peak <= capacity (true when capacity is 0)
  std::string strategy;                 // which heuristic or search produced it
  double milliseconds = 0;              // wall clock of the whole call
  std::uint64_t greedy_peak_bytes = 0;  // the portfolio's best, before any search
  // Plain best-fit-decreasing on the whole problem (best_fit_decreasing below), computed
  // alongside so that the result is never worse; 0 when not computed (time limit 0 and more
  // than a few thousand buffers) or cut by the time limit.
  std::uint64_t best_fit_decreasing_peak_bytes = 0;
  DsaStop stop = DsaStop::NoSearch;
  std::uint64_t work = 0;  // the searches' work, in DsaOptions::work_limit's units (always counted)
  // Heuristics the time limit cut short: portfolio members and the baseline give up at the
  // deadline; the start-time sweeps (O(n log n)) never do, so a placement always exists and the
  // call may end after the limit by what the sweeps, the bounds and the components take.
  std::uint64_t cut_by_time_limit = 0;
  bool stopped_at_lower_bound() const { return stop == DsaStop::LowerBound; }
};

// Max over time of the sum of sizes of the live buffers.
std::uint64_t dsa_lower_bound(const DsaProblem& problem);

DsaSolution solve_dsa(const DsaProblem& problem, const DsaOptions& options = {});

// The baseline: buffers by decreasing size (ties: longer lifetime, then input order), each at
// the smallest gap that holds it among the placed buffers it lives with, else on top of them.
// No decomposition, no search. Strategy "best-fit-decreasing", stop NoSearch (or LowerBound).
// When `deadline` passes before every buffer is placed: no offsets (empty), stop TimeLimit.
DsaSolution best_fit_decreasing(
    const DsaProblem& problem,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

}  // namespace stalloc
