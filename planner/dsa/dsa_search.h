// Exact search below the greedy peak (see dsa_search.cpp for the method).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "planner/dsa/dsa.h"

namespace stalloc::dsa_detail {

struct SearchRequest {
  const std::vector<DsaBuffer>* buffers = nullptr;  // one time component: every buffer with
                                                    // size > 0 and lower < upper
  const std::vector<std::uint64_t>* incumbent = nullptr;  // a valid placement to improve on
  std::uint64_t target = 0;                               // a peak at or below this ends the search
  std::chrono::steady_clock::time_point deadline;  // time_point::max(): none
  std::uint64_t seed = 1;  // tie-breaking among equally ranked buffers
  // Optional, shared with other workers on the same buffers: lowered to each peak found; the
  // search stops once it is at most the target.
  std::atomic<std::uint64_t>* shared_best = nullptr;
  // Search nodes (each places one buffer) over the whole call, the target's try and the
  // bisection together; 0: none. Running out ends the search as the deadline does.
  std::uint64_t work_limit = 0;
};

// Components larger than this (or with more than 30 million overlapping pairs) are left to the
// order and window searches: the exact search's state grows with the overlapping pairs.
constexpr std::size_t kExactSearchMaxBuffers = 20000;
constexpr std::uint64_t kExactSearchMaxPairs = 30'000'000;  // sum over buffers of conflicts

struct SearchResult {
  std::vector<std::uint64_t> offsets;  // the best placement (the incumbent when none better)
  std::uint64_t peak = 0;
  bool searched = false;        // false: too large for this search (or no time), nothing tried
  bool reached_target = false;  // peak <= target
  bool proved_optimal = false;  // no placement has a lower peak
  std::uint64_t refuted_below = 0;  // no placement has a peak below this (0: nothing proved)
  std::uint64_t work = 0;           // search nodes visited
};

// The target itself first, then bisection between it and the incumbent's peak: each refuted
// peak raises the bisection, so a small component ends with a proved optimum. Runs on a thread
// with a large stack of its own.
SearchResult search_below(const SearchRequest& request);

}  // namespace stalloc::dsa_detail
