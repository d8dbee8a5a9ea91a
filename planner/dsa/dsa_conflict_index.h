// Which buffers live at the same time as a given one, without looking at all pairs.
//
// Two half-open lifetimes [l1, u1) and [l2, u2) overlap iff one of them starts inside the other.
// So the buffers overlapping buffer i are (a) those starting in [lower_i, upper_i), a range of
// the buffers sorted by start, and (b) those alive at lower_i that started before it, found by a
// stabbing query on a static segment tree over the distinct start times. The cost of a query is
// O(log n + its answer), and the index is built once and shared read-only by every heuristic.
// Every lifetime must be non-empty (lower < upper): the solver sets trivial buffers aside.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "planner/dsa/dsa.h"

namespace stalloc::dsa_detail {

class DsaConflictIndex {
 public:
  explicit DsaConflictIndex(const std::vector<DsaBuffer>& buffers);

  // Calls visit(j) once for every buffer j != i whose lifetime overlaps buffer i's.
  template <typename Visit>
  void for_each_conflict(std::size_t i, Visit&& visit) const;

  // Calls visit(j) once for every buffer j whose lifetime overlaps [lower, upper).
  template <typename Visit>
  void for_each_overlapping(std::uint64_t lower, std::uint64_t upper, Visit&& visit) const;

  // Number of buffers whose lifetime overlaps buffer i's, in O(log n).
  std::size_t degree(std::size_t i) const;

 private:
  const std::vector<DsaBuffer>& buffers_;
  std::vector<std::uint64_t> starts_;        // distinct start times, ascending
  std::vector<std::uint32_t> by_start_;      // buffer indices sorted by start
  std::vector<std::uint64_t> sorted_lower_;  // starts of by_start_, for binary search
  std::vector<std::uint64_t> sorted_upper_;  // all ends, ascending
  std::size_t leaves_ = 1;                   // segment tree leaves (power of two)
  std::vector<std::uint32_t> node_begin_;    // CSR: buffers stored at tree node n are
  std::vector<std::uint32_t> node_items_;    // node_items_[node_begin_[n] .. node_begin_[n+1])
};

template <typename Visit>
void DsaConflictIndex::for_each_conflict(std::size_t i, Visit&& visit) const {
  const DsaBuffer& b = buffers_[i];
  for_each_overlapping(b.lower, b.upper, [&](std::size_t j) {
    if (j != i) visit(j);
  });
}

template <typename Visit>
void DsaConflictIndex::for_each_overlapping(std::uint64_t lower, std::uint64_t upper,
                                            Visit&& visit) const {
  if (lower >= upper) return;
  auto first = std::lower_bound(sorted_lower_.begin(), sorted_lower_.end(), lower);
  auto last = std::lower_bound(first, sorted_lower_.end(), upper);
  for (auto it = first; it != last; ++it) {
    visit(static_cast<std::size_t>(by_start_[static_cast<std::size_t>(it - sorted_lower_.begin())]));
  }
  // Stab at lower: the buffers stored on the path cover the start time at or before lower (the
  // leaf of the last start <= lower); report those that started before lower and are still live.
  auto after = std::upper_bound(starts_.begin(), starts_.end(), lower);
  if (after == starts_.begin()) return;
  const auto leaf = static_cast<std::size_t>(after - starts_.begin()) - 1;
  for (std::size_t node = leaf + leaves_; node >= 1; node >>= 1) {
    for (std::uint32_t k = node_begin_[node]; k < node_begin_[node + 1]; ++k) {
      const std::uint32_t j = node_items_[k];
      if (buffers_[j].lower < lower && buffers_[j].upper > lower) {
        visit(static_cast<std::size_t>(j));
      }
    }
  }
}

}  // namespace stalloc::dsa_detail
