#include "planner/dsa/dsa_occupancy.h"

#include <algorithm>

namespace stalloc::dsa_detail {

void OccupancyTree::reset(const std::vector<DsaBuffer>& buffers) {
  clear();
  buffers_ = &buffers;
  times_.clear();
  times_.reserve(2 * buffers.size());
  for (const DsaBuffer& b : buffers) {
    times_.push_back(b.lower);
    times_.push_back(b.upper);
  }
  std::sort(times_.begin(), times_.end());
  times_.erase(std::unique(times_.begin(), times_.end()), times_.end());
  // Leaf k is the elementary interval [times_[k], times_[k + 1]).
  const std::size_t elementary = times_.size() < 2 ? 1 : times_.size() - 1;
  leaves_ = 1;
  while (leaves_ < elementary) leaves_ <<= 1;
  if (own_.size() < 2 * leaves_) {
    own_.resize(2 * leaves_);
    under_.resize(2 * leaves_);
  }
}

void OccupancyTree::leaf_range(std::size_t i, std::size_t* lo, std::size_t* hi) const {
  const DsaBuffer& b = (*buffers_)[i];
  *lo = static_cast<std::size_t>(std::lower_bound(times_.begin(), times_.end(), b.lower) -
                                 times_.begin());
  *hi = static_cast<std::size_t>(std::lower_bound(times_.begin(), times_.end(), b.upper) -
                                 times_.begin());
}

void OccupancyTree::add(Union& u, std::uint64_t begin, std::uint64_t end) {
  // The first interval that ends at or after begin may touch or overlap [begin, end).
  auto first = std::lower_bound(u.begin(), u.end(), begin,
                                [](const Interval& iv, std::uint64_t at) { return iv.second < at; });
  auto last = first;
  while (last != u.end() && last->first <= end) {
    begin = std::min(begin, last->first);
    end = std::max(end, last->second);
    ++last;
  }
  if (first == last) {
    u.insert(first, {begin, end});
  } else {
    *first = {begin, end};
    u.erase(first + 1, last);
  }
}

void OccupancyTree::insert(std::size_t i, std::uint64_t offset) {
  std::size_t lo = 0;
  std::size_t hi = 0;
  leaf_range(i, &lo, &hi);
  const std::uint64_t end = offset + (*buffers_)[i].size;
  auto mark = [&](std::size_t node) {
    if (own_[node].empty() && under_[node].empty()) touched_.push_back(node);
  };
  for (std::size_t l = lo + leaves_, h = hi + leaves_; l < h; l >>= 1, h >>= 1) {
    if ((l & 1) != 0) {
      mark(l);
      add(own_[l], offset, end);
      add(under_[l], offset, end);
      ++l;
    }
    if ((h & 1) != 0) {
      --h;
      mark(h);
      add(own_[h], offset, end);
      add(under_[h], offset, end);
    }
  }
  // Every node on the two root paths meets the lifetime: its "under" union includes it.
  for (std::size_t node = (lo + leaves_) >> 1; node >= 1; node >>= 1) {
    mark(node);
    add(under_[node], offset, end);
  }
  const std::size_t right = (hi - 1 + leaves_) >> 1;
  for (std::size_t node = right, left = (lo + leaves_) >> 1; node >= 1 && node != left;
       node >>= 1, left >>= 1) {
    mark(node);
    add(under_[node], offset, end);
  }
}

void OccupancyTree::collect(std::size_t i) const {
  std::size_t lo = 0;
  std::size_t hi = 0;
  leaf_range(i, &lo, &hi);
  runs_.clear();
  auto take = [&](const Union& u) {
    if (!u.empty()) runs_.push_back({u.data(), u.data() + u.size()});
  };
  for (std::size_t l = lo + leaves_, h = hi + leaves_; l < h; l >>= 1, h >>= 1) {
    if ((l & 1) != 0) {
      take(under_[l]);
      ++l;
    }
    if ((h & 1) != 0) {
      --h;
      take(under_[h]);
    }
  }
  // The nodes strictly above the leaves on both root paths: own unions (buffers covering them).
  for (std::size_t node = (lo + leaves_) >> 1; node >= 1; node >>= 1) {
    take(own_[node]);
  }
  for (std::size_t node = (hi - 1 + leaves_) >> 1, left = (lo + leaves_) >> 1;
       node >= 1 && node != left; node >>= 1, left >>= 1) {
    take(own_[node]);
  }
}

void OccupancyTree::clear() {
  for (std::size_t node : touched_) {
    own_[node].clear();
    under_[node].clear();
  }
  touched_.clear();
}

}  // namespace stalloc::dsa_detail
