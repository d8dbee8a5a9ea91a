// Interval colouring of chunk demands: each demand needs `count` physical chunks over
// [start, end). Colouring in order of start, reusing any chunk whose demand has ended, is optimal
// for interval graphs: the number of chunks equals the most chunks demanded at one time. Which
// released chunks a demand gets is free; they are chosen as runs of consecutive ids, because the
// runtime maps a range whose chunks are consecutive inside one shared view.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace stalloc {

struct ChunkDemand {
  std::uint64_t start = 0;  // [start, end) in requests
  std::uint64_t end = 0;
  std::uint32_t count = 1;
};

struct ChunkColouring {
  std::uint64_t num_chunks = 0;
  // Demand d holds chunk ids ids[first[d]] .. ids[first[d] + count - 1].
  std::vector<std::uint64_t> first;
  std::vector<std::uint32_t> ids;

  std::span<const std::uint32_t> chunks_of(std::size_t demand, std::uint32_t count) const {
    return {ids.data() + first[demand], count};
  }
};

// Demand `before`'s last chunk is wanted directly before demand `after`'s first (a slot's range
// is the chunks of several demands in a row): ids are chosen to make them consecutive where
// the released ones allow, without ever using more chunks.
struct ChunkAdjacency {
  std::size_t before = 0;
  std::size_t after = 0;
};

// cap (optional): the count a first colouring reached. Below it, a demand that no released run
// holds whole takes new consecutive ids instead of pieces of released runs; the count may then
// exceed the cap (new ids taken early can leave a later demand short), so the caller compares.
ChunkColouring colour_chunk_demands(const std::vector<ChunkDemand>& demands,
                                    const std::vector<ChunkAdjacency>& adjacent = {},
                                    std::uint64_t cap = UINT64_MAX);

// Which chunks are busy when: answers "which chunks are idle over all of [start, end)".
class ChunkOccupancy {
 public:
  explicit ChunkOccupancy(std::uint64_t num_chunks) : busy_(num_chunks) {}
  void add(std::uint32_t chunk, std::uint64_t start, std::uint64_t end) {
    busy_[chunk].emplace_back(start, end);
  }
  // Call once after the last add, before idle_over.
  void seal();
  std::vector<std::uint32_t> idle_over(std::uint64_t start, std::uint64_t end) const;
  // At most `limit` of them, scanning chunk ids upwards from `first` and wrapping around.
  std::vector<std::uint32_t> idle_over(std::uint64_t start, std::uint64_t end, std::uint64_t first,
                                       std::uint64_t limit) const;
  // The first of `length` consecutive chunk ids idle over all of [start, end), scanning upwards
  // from `first` without wrapping around; SIZE_MAX when there is none.
  std::size_t idle_run(std::uint64_t start, std::uint64_t end, std::uint64_t first,
                       std::uint64_t length) const;

 private:
  bool idle(std::size_t chunk, std::uint64_t start, std::uint64_t end) const;
  // Per chunk id, its busy intervals sorted by start; disjoint once sealed.
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> busy_;
};

}  // namespace stalloc
