// Greedy placement in order of start time, by a sweep: when buffers are taken in start order,
// the placed buffers a new one overlaps are exactly those still live, so instead of asking the
// conflict index, the sweep keeps the live buffers and the free gaps between them. Each step is
// O(log n) for best fit (gaps ordered by size); lowest offset scans the gaps by address. The
// result equals place_in_order with the StartTime order; this one scales to millions of buffers.
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <utility>

#include "planner/dsa/dsa_heuristics.h"

namespace stalloc::dsa_detail {

namespace {

class FreeSpace {
 public:
  // Lowest (or tightest, for best fit) aligned offset where size bytes fit.
  std::uint64_t find(std::uint64_t size, std::uint64_t alignment, Placement placement) const {
    if (placement == Placement::BestFit) {
      for (auto it = by_size_.lower_bound({size, 0}); it != by_size_.end(); ++it) {
        const std::uint64_t at = align_up(it->second, alignment);
        if (at + size <= it->second + it->first) return at;
      }
    } else {
      for (const auto& [begin, end] : by_address_) {
        const std::uint64_t at = align_up(begin, alignment);
        if (at + size <= end) return at;
      }
    }
    return align_up(top(), alignment);
  }

  void occupy(std::uint64_t at, std::uint64_t size) {
    const std::uint64_t end = at + size;
    auto gap = by_address_.upper_bound(at);
    if (gap != by_address_.begin() && std::prev(gap)->second >= end) {
      --gap;
      const auto [g0, g1] = *gap;
      erase_gap(gap);
      if (g0 < at) add_gap(g0, at);
      if (end < g1) add_gap(end, g1);
    } else {
      const std::uint64_t old_top = top();
      if (old_top < at) add_gap(old_top, at);
    }
    live_.emplace(at, end);
  }

  void release(std::uint64_t at) {
    auto it = live_.find(at);
    std::uint64_t begin = at;
    std::uint64_t end = it->second;
    const bool topmost = std::next(it) == live_.end();
    live_.erase(it);
    auto before = by_address_.lower_bound(at);
    if (before != by_address_.begin() && std::prev(before)->second == at) {
      --before;
      begin = before->first;
      erase_gap(before);
    }
    if (topmost) return;  // the space above the new top is implicit
    auto after = by_address_.find(end);
    if (after != by_address_.end()) {
      end = after->second;
      erase_gap(after);
    }
    add_gap(begin, end);
  }

 private:
  std::uint64_t top() const { return live_.empty() ? 0 : live_.rbegin()->second; }

  void add_gap(std::uint64_t begin, std::uint64_t end) {
    by_address_.emplace(begin, end);
    by_size_.emplace(end - begin, begin);
  }

  void erase_gap(std::map<std::uint64_t, std::uint64_t>::iterator gap) {
    by_size_.erase({gap->second - gap->first, gap->first});
    by_address_.erase(gap);
  }

  std::map<std::uint64_t, std::uint64_t> live_;        // offset -> end of each live buffer
  std::map<std::uint64_t, std::uint64_t> by_address_;  // free gaps below the top: begin -> end
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  // the same gaps: (size, begin)
};

}  // namespace

std::vector<std::uint64_t> place_by_sweep(const std::vector<DsaBuffer>& buffers,
                                          const std::vector<std::uint32_t>& start_order,
                                          Placement placement) {
  std::vector<std::uint64_t> offsets(buffers.size(), 0);
  FreeSpace space;
  using Ending = std::pair<std::uint64_t, std::uint32_t>;  // (upper, buffer)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<>> live;
  for (std::uint32_t i : start_order) {
    const DsaBuffer& b = buffers[i];
    while (!live.empty() && live.top().first <= b.lower) {
      space.release(offsets[live.top().second]);
      live.pop();
    }
    offsets[i] = space.find(b.size, b.alignment, placement);
    space.occupy(offsets[i], b.size);
    live.emplace(b.upper, i);
  }
  return offsets;
}

}  // namespace stalloc::dsa_detail
