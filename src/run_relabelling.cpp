#include "src/run_relabelling.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "src/pool_runs.h"

namespace stalloc {

std::vector<std::uint32_t> relabel_onto_runs(const std::vector<const std::vector<std::uint32_t>*>& views,
                                             const std::vector<bool>& alone, std::uint32_t labels,
                                             const PlanPool& pool, const PoolClaims& claims,
                                             std::vector<std::uint32_t>* split) {
  const auto pool_size = static_cast<std::uint32_t>(pool.size());
  auto held = [&](std::uint32_t c) { return c < claims.held.size() && claims.held[c]; };
  // Pieces of the plan's runs not placed yet: (length, first chunk).
  std::set<std::pair<std::uint32_t, std::uint32_t>> pieces;
  std::uint32_t label = 0;
  for (std::uint32_t length :
       pool_runs(views, alone, 0, labels, std::numeric_limits<std::uint32_t>::max())) {
    if (length > 1) pieces.emplace(length, label);
    label += length;
  }
  std::vector<std::pair<std::uint32_t, std::uint32_t>> runs;  // (length, head), none held
  for (std::uint32_t head = 0; head < pool_size; head += pool.run_length(head)) {
    const std::uint32_t length = pool.run_length(head);
    bool free = length > 1;
    for (std::uint32_t k = 0; free && k < length; ++k) free = !held(head + k);
    if (free) runs.emplace_back(length, head);
  }
  std::stable_sort(runs.begin(), runs.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  constexpr std::uint32_t kUnplaced = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> to(labels, kUnplaced);
  std::vector<std::uint32_t> unused;  // runs no piece fits, by their heads
  for (const auto& [length, head] : runs) {
    auto it = pieces.lower_bound({length, 0});
    if (it == pieces.end()) {
      unused.push_back(head);
      continue;
    }
    const auto [piece_length, first] = *it;
    pieces.erase(it);
    for (std::uint32_t k = 0; k < length; ++k) to[first + k] = head + k;
    if (piece_length > length) pieces.emplace(piece_length - length, first + length);
  }
  std::vector<std::uint32_t> spare;
  for (std::uint32_t c = 0; c < pool_size; ++c) {
    if (pool.alone(c) && !held(c)) spare.push_back(c);
  }
  const auto left = static_cast<std::size_t>(std::count(to.begin(), to.end(), kUnplaced));
  std::sort(unused.begin(), unused.end());
  for (std::uint32_t head : unused) {
    if (spare.size() >= left) break;
    if (head >= claims.splittable.size() || !claims.splittable[head]) continue;
    split->push_back(head);
    for (std::uint32_t k = 0; k < pool.run_length(head); ++k) spare.push_back(head + k);
  }
  std::sort(spare.begin(), spare.end());
  std::size_t next = 0;
  std::uint32_t past = pool_size;
  for (std::uint32_t& c : to) {
    if (c == kUnplaced) c = next < spare.size() ? spare[next++] : past++;
  }
  return to;
}

}  // namespace stalloc
