#include "planner/chunk/chunk_colouring.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <queue>
#include <set>

namespace stalloc {

namespace {

// Released chunk ids as maximal runs of consecutive ids. A demand takes the shortest run that
// holds it whole, so that its chunks are consecutive: the runtime maps every slot whose chunks
// are one ascending run inside the pool's single view, and gives a view of its own (one
// mapping per chunk) to every other slot. Handed out lowest first instead, a 7B pipeline
// schedule's whole-chunk activations came out in 2-4 runs each (llama7b-tp4pp2vpp2: 8,691
// slots, 246,758 mappings at install).
class FreeRuns {
 public:
  std::uint64_t size() const { return free_; }

  void release(std::uint32_t id) {
    std::uint32_t start = id;
    std::uint32_t length = 1;
    auto next = runs_.find(id + 1);
    if (next != runs_.end()) {
      length += next->second;
      erase(next);
    }
    auto it = runs_.lower_bound(id);
    if (it != runs_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == id) {
        start = prev->first;
        length += prev->second;
        erase(prev);
      }
    }
    insert(start, length);
    ++free_;
  }

  bool has_run(std::uint32_t count) const {
    return by_length_.lower_bound({count, 0}) != by_length_.end();
  }

  // Takes ids [first, first + count) when they are all released.
  bool take_exact(std::uint32_t first, std::uint32_t count, std::uint32_t* out) {
    auto it = runs_.upper_bound(first);
    if (it == runs_.begin()) return false;
    --it;
    const auto [start, length] = *it;
    if (std::uint64_t{first} + count > std::uint64_t{start} + length) return false;
    erase(it);
    if (first > start) insert(start, first - start);
    if (first + count < start + length) insert(first + count, start + length - first - count);
    for (std::uint32_t j = 0; j < count; ++j) out[j] = first + j;
    free_ -= count;
    return true;
  }

  // Takes `count` ids from the shortest run that also holds `left` ids before them and `right`
  // after (left free for neighbours still to come); false when no run does.
  bool take_padded(std::uint32_t count, std::uint32_t left, std::uint32_t right, std::uint32_t* out) {
    auto fit = by_length_.lower_bound({count + left + right, 0});
    if (fit == by_length_.end()) return false;
    return take_exact(fit->second + left, count, out);
  }

  // Appends `count` ids to out: from the shortest run that holds them all, or else from the
  // longest runs, fewest pieces first. Needs count <= size().
  void take(std::uint32_t count, std::uint32_t* out) {
    while (count > 0) {
      auto fit = by_length_.lower_bound({count, 0});
      if (fit == by_length_.end()) fit = std::prev(by_length_.end());
      const auto [length, start] = *fit;
      const std::uint32_t n = std::min(length, count);
      erase(runs_.find(start));
      if (n < length) insert(start + n, length - n);
      for (std::uint32_t j = 0; j < n; ++j) *out++ = start + j;
      count -= n;
      free_ -= n;
    }
  }

 private:
  void insert(std::uint32_t start, std::uint32_t length) {
    runs_.emplace(start, length);
    by_length_.emplace(length, start);
  }
  void erase(std::map<std::uint32_t, std::uint32_t>::iterator it) {
    by_length_.erase({it->second, it->first});
    runs_.erase(it);
  }

  std::map<std::uint32_t, std::uint32_t> runs_;                // start -> length
  std::set<std::pair<std::uint32_t, std::uint32_t>> by_length_;  // (length, start)
  std::uint64_t free_ = 0;
};

}  // namespace

ChunkColouring colour_chunk_demands(const std::vector<ChunkDemand>& demands,
                                    const std::vector<ChunkAdjacency>& adjacent,
                                    std::uint64_t cap) {
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
  // Per demand, the adjacencies it is part of.
  std::vector<std::vector<std::size_t>> touching(demands.size());
  for (std::size_t a = 0; a < adjacent.size(); ++a) {
    touching[adjacent[a].before].push_back(a);
    touching[adjacent[a].after].push_back(a);
  }
  std::vector<bool> coloured(demands.size(), false);
  // Where the neighbours coloured so far want the demand's first chunk.
  auto wanted_firsts = [&](std::size_t d, std::vector<std::uint64_t>* firsts) {
    firsts->clear();
    for (std::size_t a : touching[d]) {
      const ChunkAdjacency& adj = adjacent[a];
      if (adj.after == d && coloured[adj.before] && demands[adj.before].count > 0) {
        firsts->push_back(std::uint64_t{out.ids[out.first[adj.before] + demands[adj.before].count - 1]} + 1);
      } else if (adj.before == d && coloured[adj.after] && demands[adj.after].count > 0) {
        const std::uint64_t next = out.ids[out.first[adj.after]];
        if (next >= demands[d].count) firsts->push_back(next - demands[d].count);
      }
    }
  };
  std::vector<std::uint64_t> firsts;

  using Ending = std::pair<std::uint64_t, std::size_t>;  // (end, demand)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<>> live;
  FreeRuns released;
  std::uint32_t next_id = 0;
  for (std::size_t d : order) {
    const ChunkDemand& demand = demands[d];
    while (!live.empty() && live.top().first <= demand.start) {
      const std::size_t done = live.top().second;
      live.pop();
      for (std::uint32_t id : out.chunks_of(done, demands[done].count)) released.release(id);
    }
    // Every released chunk is used before a new one is made: the count stays the most chunks
    // demanded at one time.
    std::uint32_t* ids = out.ids.data() + out.first[d];
    coloured[d] = true;
    if (demand.count == 0) continue;
    const auto reused = static_cast<std::uint32_t>(std::min<std::uint64_t>(demand.count, released.size()));
    bool placed = false;
    if (reused == demand.count) {
      wanted_firsts(d, &firsts);
      for (std::uint64_t first : firsts) {
        if (first <= UINT32_MAX && released.take_exact(static_cast<std::uint32_t>(first), demand.count, ids)) {
          placed = true;
          break;
        }
      }
    }
    if (!placed && reused == demand.count) {
      // Room on each side for the neighbours not coloured yet.
      std::uint32_t left = 0, right = 0;
      for (std::size_t a : touching[d]) {
        if (adjacent[a].after == d && !coloured[adjacent[a].before]) left = 1;
        if (adjacent[a].before == d && !coloured[adjacent[a].after]) right = 1;
      }
      placed = (left + right > 0) && released.take_padded(demand.count, left, right, ids);
    }
    if (!placed && cap != UINT64_MAX && !released.has_run(demand.count) &&
        std::uint64_t{next_id} + demand.count <= cap) {
      for (std::uint32_t j = 0; j < demand.count; ++j) ids[j] = next_id++;
      placed = true;
    }
    if (!placed) {
      released.take(reused, ids);
      for (std::uint32_t j = reused; j < demand.count; ++j) ids[j] = next_id++;
    }
    live.emplace(demand.end, d);
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

std::size_t ChunkOccupancy::idle_run(std::uint64_t start, std::uint64_t end, std::uint64_t first,
                                     std::uint64_t length) const {
  std::uint64_t run = 0;
  for (std::size_t id = first; id < busy_.size(); ++id) {
    run = idle(id, start, end) ? run + 1 : 0;
    if (run == length) return id + 1 - length;
  }
  return SIZE_MAX;
}

}  // namespace stalloc
