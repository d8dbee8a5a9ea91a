// Search over orderings: greedy placements in orders drawn around the best one found (see
// dsa_order_search.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_conflict_index.h"

namespace stalloc::dsa_detail {

struct OrderSearchRequest {
  const std::vector<DsaBuffer>* buffers = nullptr;  // every one with size > 0 and lower < upper
  const DsaConflictIndex* index = nullptr;          // over *buffers
  const std::vector<std::uint64_t>* incumbent = nullptr;  // a valid placement to improve on
  std::uint64_t target = 0;  // a peak at or below this ends the search
  std::chrono::steady_clock::time_point deadline;  // time_point::max(): none
  std::uint64_t seed = 1;
  std::atomic<std::uint64_t>* shared_best = nullptr;  // as in WindowSearchRequest
  // Buffer placements, buffers.size() per order; no order is begun that would pass it. 0: none.
  std::uint64_t work_limit = 0;
};

struct OrderSearchResult {
  std::vector<std::uint64_t> offsets;  // the best placement found (the incumbent if none better)
  std::uint64_t peak = 0;
  std::uint64_t orders = 0;        // greedy placements made
  std::uint64_t improvements = 0;  // times the peak went down
  std::uint64_t work = 0;          // buffer placements: orders times buffers
};

OrderSearchResult improve_by_orders(const OrderSearchRequest& request);

}  // namespace stalloc::dsa_detail
