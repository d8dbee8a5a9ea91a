// Anytime improvement of a placement of any size by re-placing time windows (see
// dsa_window_search.cpp for the method).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_conflict_index.h"

namespace stalloc::dsa_detail {

struct WindowSearchRequest {
  const std::vector<DsaBuffer>* buffers = nullptr;  // every one with size > 0 and lower < upper
  const DsaConflictIndex* index = nullptr;          // over *buffers
  const std::vector<std::uint64_t>* incumbent = nullptr;  // a valid placement to improve on
  std::uint64_t target = 0;  // a peak at or below this ends the search (raised to the bound)
  std::chrono::steady_clock::time_point deadline;  // time_point::max(): none
  std::uint64_t seed = 1;
  // Optional, shared by workers on the same buffers: the best peak any of them has found. Each
  // lowers it when it improves, and stops once it is at or below the target.
  std::atomic<std::uint64_t>* shared_best = nullptr;
  // Buffer placements: a window costs the buffers it lifts and the fixed ones around them (each
  // goes into the occupancy tree); the search stops before a window that would pass it. 0: none.
  std::uint64_t work_limit = 0;
};

struct WindowSearchResult {
  std::vector<std::uint64_t> offsets;  // the best placement found (the incumbent if none better)
  std::uint64_t peak = 0;
  std::uint64_t windows = 0;       // windows re-placed
  std::uint64_t lifted = 0;        // buffers lifted, summed over the windows
  std::uint64_t fixed = 0;         // fixed buffers around them, summed over the windows
  std::uint64_t accepted = 0;      // re-placements kept
  std::uint64_t improvements = 0;  // times the peak went down
  std::uint64_t work = 0;          // buffer placements: lifted plus fixed, summed over windows
};

WindowSearchResult improve_by_windows(const WindowSearchRequest& request);

}  // namespace stalloc::dsa_detail
