#include "planner/chunk/chunk_colouring.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>

namespace stalloc {

ChunkColouring colour_chunk_demands(const std::vector<ChunkDemand>& demands) {
  ChunkColouring out;
  std::vector<std::size_t> order(demands.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return demands[a].start < demands[b].start;
  });
  std::uint64_t total = 0;
  out.first.reserve(demands.size());
  for (const ChunkDemand& d : demands) {
    out.first.push_back(total);
    total += d.count;
  }
  out.ids.assign(total, 0);

  using Ending = std::pair<std::uint64_t, std::size_t>;  // (end, demand)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<>> live;
  // Lowest id first. Any released chunk is as good for the count, but the runtime checks a
  // slot's chunks 64 ids to a word: handed out from a stack, a 7B activation's ~46 chunks
  // scattered over 35 words on average (llama7b-tp2pp2-r, G = 2 MiB); lowest first, over 2.
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> free_ids;
  std::uint32_t next_id = 0;
  for (std::size_t d : order) {
    const ChunkDemand& demand = demands[d];
    while (!live.empty() && live.top().first <= demand.start) {
      const std::size_t done = live.top().second;
      live.pop();
      for (std::uint32_t id : out.chunks_of(done, demands[done].count)) free_ids.push(id);
    }
    for (std::uint32_t j = 0; j < demand.count; ++j) {
      std::uint32_t id;
      if (free_ids.empty()) {
        id = next_id++;
      } else {
        id = free_ids.top();
        free_ids.pop();
      }
      out.ids[out.first[d] + j] = id;
    }
    if (demand.count > 0) live.emplace(demand.end, d);
  }
  out.num_chunks = next_id;
  return out;
}

void ChunkOccupancy::seal() {
  for (auto& intervals : busy_) {
    std::sort(intervals.begin(), intervals.end());
    std::size_t kept = 0;
    for (const auto& iv : intervals) {
      if (kept > 0 && iv.first <= intervals[kept - 1].second) {
        intervals[kept - 1].second = std::max(intervals[kept - 1].second, iv.second);
      } else {
        intervals[kept++] = iv;
      }
    }
    intervals.resize(kept);
  }
}

bool ChunkOccupancy::idle(std::size_t chunk, std::uint64_t start, std::uint64_t end) const {
  const auto& intervals = busy_[chunk];
  // The first interval ending after start is the only one that can overlap [start, end),
  // because intervals of one chunk are disjoint and sorted.
  auto it = std::partition_point(intervals.begin(), intervals.end(),
                                 [&](const auto& iv) { return iv.second <= start; });
  return it == intervals.end() || it->first >= end;
}

std::vector<std::uint32_t> ChunkOccupancy::idle_over(std::uint64_t start,
                                                     std::uint64_t end) const {
  return idle_over(start, end, 0, busy_.size());
}

std::vector<std::uint32_t> ChunkOccupancy::idle_over(std::uint64_t start, std::uint64_t end,
                                                     std::uint64_t first,
                                                     std::uint64_t limit) const {
  std::vector<std::uint32_t> out;
  const std::size_t n = busy_.size();
  for (std::size_t k = 0; k < n && out.size() < limit; ++k) {
    const std::size_t id = (first + k) % n;
    if (idle(id, start, end)) out.push_back(static_cast<std::uint32_t>(id));
  }
  return out;
}

}  // namespace stalloc
