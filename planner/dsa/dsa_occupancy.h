// Where the placed buffers are, for greedy placement in any order without visiting every
// placed buffer a new one overlaps.
//
// A segment tree over the elementary time intervals. A placed buffer is stored at the nodes of
// the canonical decomposition of its lifetime ("own": it covers their whole time range), and its
// address range is added to the "under" union of every node its lifetime meets on the way (the
// canonical nodes and the nodes on the two root paths of its first and last leaf). Both are
// unions of address intervals, kept merged: a tightly packed region is one interval however many
// buffers make it up. The placed buffers overlapping a lifetime q are then exactly those in the
// "under" unions of q's canonical nodes and the "own" unions of the nodes on q's two root paths
// (a buffer's canonical node that meets q but is not inside one of q's canonical nodes contains
// q's first or last leaf). A query merges O(log T) short lists instead of the d placed
// conflicts, and an insertion touches O(log T) lists.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "planner/dsa/dsa.h"

namespace stalloc::dsa_detail {

class OccupancyTree {
 public:
  // Every lifetime non-empty. Times are compressed over all buffers given. The tree keeps a
  // pointer to buffers: it must outlive the tree (or the next reset).
  explicit OccupancyTree(const std::vector<DsaBuffer>& buffers) { reset(buffers); }

  // Empties the tree and sets it up over other buffers, keeping what memory it has.
  void reset(const std::vector<DsaBuffer>& buffers);

  // Calls gap(begin, end) for each free address gap below the top of the placed buffers that
  // overlap buffer i in time, in address order, and returns that top (the end of the highest
  // of them, 0 if none); stops early, returning where it stopped, when gap returns false.
  template <typename Gap>
  std::uint64_t scan(std::size_t i, Gap&& gap) const;

  void insert(std::size_t i, std::uint64_t offset);

  // Forgets every placed buffer (the tree can be reused for another order).
  void clear();

 private:
  using Interval = std::pair<std::uint64_t, std::uint64_t>;  // [begin, end)
  using Union = std::vector<Interval>;                       // disjoint, not touching, sorted

  static void add(Union& u, std::uint64_t begin, std::uint64_t end);
  void leaf_range(std::size_t i, std::size_t* lo, std::size_t* hi) const;
  void collect(std::size_t i) const;

  const std::vector<DsaBuffer>* buffers_ = nullptr;
  std::vector<std::uint64_t> times_;  // distinct lower and upper values, ascending
  std::size_t leaves_ = 1;
  std::vector<Union> own_;
  std::vector<Union> under_;
  std::vector<std::size_t> touched_;  // nodes with something stored, for clear()
  struct Run {
    const Interval* at;
    const Interval* end;
  };
  mutable std::vector<Run> runs_;  // the non-empty unions a query looks at
};

template <typename Gap>
std::uint64_t OccupancyTree::scan(std::size_t i, Gap&& gap) const {
  collect(i);
  // A k-way merge of the runs by begin (a min-heap of their heads).
  auto later = [](const Run& a, const Run& b) { return a.at->first > b.at->first; };
  std::make_heap(runs_.begin(), runs_.end(), later);
  std::uint64_t cursor = 0;
  while (!runs_.empty()) {
    std::pop_heap(runs_.begin(), runs_.end(), later);
    Run& run = runs_.back();
    const auto [begin, end] = *run.at;
    if (begin > cursor && !gap(cursor, begin)) return cursor;
    cursor = std::max(cursor, end);
    // Intervals of this run that end below the cursor add nothing: skip them at once.
    ++run.at;
    if (run.at != run.end && run.at->second <= cursor) {
      run.at = std::upper_bound(run.at, run.end, cursor,
                                [](std::uint64_t c, const Interval& iv) { return c < iv.second; });
    }
    if (run.at == run.end) {
      runs_.pop_back();
    } else {
      std::push_heap(runs_.begin(), runs_.end(), later);
    }
  }
  return cursor;
}

}  // namespace stalloc::dsa_detail
