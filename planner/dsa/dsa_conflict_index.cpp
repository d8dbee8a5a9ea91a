#include "planner/dsa/dsa_conflict_index.h"

#include <algorithm>
#include <numeric>

namespace stalloc::dsa_detail {

DsaConflictIndex::DsaConflictIndex(const std::vector<DsaBuffer>& buffers) : buffers_(buffers) {
  const std::size_t n = buffers.size();
  by_start_.assign(n, 0);
  std::iota(by_start_.begin(), by_start_.end(), 0u);
  std::stable_sort(by_start_.begin(), by_start_.end(), [&](std::uint32_t a, std::uint32_t b) {
    return buffers[a].lower < buffers[b].lower;
  });
  sorted_lower_.reserve(n);
  sorted_upper_.reserve(n);
  for (std::uint32_t j : by_start_) {
    sorted_lower_.push_back(buffers[j].lower);
    sorted_upper_.push_back(buffers[j].upper);
  }
  std::sort(sorted_upper_.begin(), sorted_upper_.end());
  starts_ = sorted_lower_;
  starts_.erase(std::unique(starts_.begin(), starts_.end()), starts_.end());
  while (leaves_ < starts_.size()) leaves_ <<= 1;

  // Each buffer covers the start times in [lower, upper): a leaf range, stored at the O(log n)
  // nodes of its canonical decomposition. Two passes build the lists in place (CSR).
  auto leaf_range = [&](const DsaBuffer& b) {
    auto lo = std::lower_bound(starts_.begin(), starts_.end(), b.lower) - starts_.begin();
    auto hi = std::lower_bound(starts_.begin(), starts_.end(), b.upper) - starts_.begin();
    return std::pair<std::size_t, std::size_t>(static_cast<std::size_t>(lo),
                                               static_cast<std::size_t>(hi));
  };
  auto decompose = [&](std::size_t lo, std::size_t hi, auto&& emit) {
    for (lo += leaves_, hi += leaves_; lo < hi; lo >>= 1, hi >>= 1) {
      if ((lo & 1) != 0) emit(lo++);
      if ((hi & 1) != 0) emit(--hi);
    }
  };
  std::vector<std::uint32_t> counts(2 * leaves_ + 1, 0);
  for (std::size_t j = 0; j < n; ++j) {
    auto [lo, hi] = leaf_range(buffers[j]);
    decompose(lo, hi, [&](std::size_t node) { ++counts[node]; });
  }
  node_begin_.assign(2 * leaves_ + 1, 0);
  for (std::size_t node = 1; node <= 2 * leaves_; ++node) {
    node_begin_[node] = node_begin_[node - 1] + counts[node - 1];
  }
  node_items_.resize(node_begin_[2 * leaves_]);
  std::vector<std::uint32_t> fill(node_begin_.begin(), node_begin_.end() - 1);
  for (std::size_t j = 0; j < n; ++j) {
    auto [lo, hi] = leaf_range(buffers[j]);
    decompose(lo, hi,
              [&](std::size_t node) { node_items_[fill[node]++] = static_cast<std::uint32_t>(j); });
  }
}

std::size_t DsaConflictIndex::degree(std::size_t i) const {
  const DsaBuffer& b = buffers_[i];
  // Buffers starting before upper_i, less those already over at lower_i, less i itself.
  auto started =
      std::lower_bound(sorted_lower_.begin(), sorted_lower_.end(), b.upper) - sorted_lower_.begin();
  auto over =
      std::upper_bound(sorted_upper_.begin(), sorted_upper_.end(), b.lower) - sorted_upper_.begin();
  return static_cast<std::size_t>(started - over) - 1;
}

}  // namespace stalloc::dsa_detail
