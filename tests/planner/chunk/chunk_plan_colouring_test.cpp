#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "planner/chunk/chunk_colouring.h"

namespace stalloc {
namespace {

std::uint64_t max_demanded(const std::vector<ChunkDemand>& demands) {
  std::uint64_t best = 0;
  for (const ChunkDemand& d : demands) {
    std::uint64_t at_start = 0;
    for (const ChunkDemand& e : demands) {
      if (e.start <= d.start && d.start < e.end) at_start += e.count;
    }
    best = std::max(best, at_start);
  }
  return best;
}

TEST(ChunkColouring, UsesExactlyTheMostChunksLiveAtOnceAndNeverShares) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 20; ++round) {
    std::vector<ChunkDemand> demands;
    for (int i = 0; i < 200; ++i) {
      const std::uint64_t start = rng() % 1000;
      demands.push_back({start, start + 1 + rng() % 200, static_cast<std::uint32_t>(1 + rng() % 5)});
    }
    const ChunkColouring c = colour_chunk_demands(demands);
    EXPECT_EQ(c.num_chunks, max_demanded(demands));
    for (std::size_t a = 0; a < demands.size(); ++a) {
      auto ca = c.chunks_of(a, demands[a].count);
      std::vector<std::uint32_t> own(ca.begin(), ca.end());
      std::sort(own.begin(), own.end());
      EXPECT_EQ(std::adjacent_find(own.begin(), own.end()), own.end());
      for (std::size_t b = a + 1; b < demands.size(); ++b) {
        if (demands[a].end <= demands[b].start || demands[b].end <= demands[a].start) continue;
        for (std::uint32_t id : c.chunks_of(b, demands[b].count)) {
          EXPECT_FALSE(std::binary_search(own.begin(), own.end(), id))
              << "demands " << a << " and " << b << " overlap in time and share chunk " << id;
        }
      }
    }
  }
}

TEST(ChunkColouring, BackToBackDemandsReuseChunks) {
  const ChunkColouring c = colour_chunk_demands({{0, 5, 3}, {5, 9, 3}, {9, 12, 2}});
  EXPECT_EQ(c.num_chunks, 3u);
}

TEST(ChunkOccupancy, IdleChunksAreThoseFreeOverTheWholeInterval) {
  ChunkOccupancy occ(3);
  occ.add(0, 0, 10);
  occ.add(1, 0, 4);
  occ.add(1, 3, 6);  // overlapping intervals of one chunk merge
  occ.add(2, 8, 12);
  occ.seal();
  EXPECT_EQ(occ.idle_over(6, 8), (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(occ.idle_over(5, 8), (std::vector<std::uint32_t>{2}));
  EXPECT_EQ(occ.idle_over(10, 20), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_TRUE(occ.idle_over(0, 12).empty());
}

}  // namespace
}  // namespace stalloc
