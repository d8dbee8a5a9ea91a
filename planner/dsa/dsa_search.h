// Exact search below the greedy peak (see dsa_search.cpp for the method).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "planner/dsa/dsa.h"

namespace stalloc::dsa_detail {

struct SearchRequest {
  const std::vector<DsaBuffer>* buffers = nullptr;  // every one with size > 0 and lower < upper
  const std::vector<std::uint64_t>* incumbent = nullptr;  // a valid placement to improve on
  std::uint64_t target = 0;                               // a peak at or below this ends the search
  std::chrono::steady_clock::time_point deadline;
  std::uint64_t seed = 1;  // tie-breaking among equally ranked buffers
};

struct SearchResult {
  std::vector<std::uint64_t> offsets;
  std::uint64_t peak = 0;
};

// A placement with a lower peak than the incumbent's, or nullopt when none was found in time.
std::optional<SearchResult> search_below(const SearchRequest& request);

}  // namespace stalloc::dsa_detail
