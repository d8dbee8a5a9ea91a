#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>

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

bool consecutive(std::span<const std::uint32_t> ids) {
  for (std::size_t j = 1; j < ids.size(); ++j) {
    if (ids[j] != ids[j - 1] + 1) return false;
  }
  return true;
}

// Released chunks {0} and {2, 3}: a demand of two takes the run 2-3, not the lowest ids 0 and 2,
// and the demand of one then takes 0; no chunk more than the most demanded at once.
TEST(ChunkColouring, ADemandTakesARunOfConsecutiveChunksWhereOneIsFree) {
  const std::vector<ChunkDemand> demands = {
      {0, 5, 1}, {0, 20, 1}, {0, 5, 2}, {0, 20, 1}, {5, 20, 2}, {5, 20, 1}};
  const ChunkColouring c = colour_chunk_demands(demands);
  EXPECT_EQ(c.num_chunks, 5u);
  EXPECT_EQ(std::vector<std::uint32_t>(c.chunks_of(4, 2).begin(), c.chunks_of(4, 2).end()),
            (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(c.chunks_of(5, 1)[0], 0u);
}

// A slot's range is the chunks of several demands in a row: where released chunks allow, the
// colouring makes them consecutive, whichever demand is coloured first.
TEST(ChunkColouring, AdjacentDemandsGetConsecutiveChunks) {
  // Demand 0 frees six chunks at 2; demands 1 (3 chunks) and 2 (1 chunk) start together, and
  // demand 2 is wanted before demand 1, demand 3 after it.
  const std::vector<ChunkDemand> demands = {{0, 2, 6}, {2, 10, 3}, {2, 10, 1}, {2, 10, 1}};
  const ChunkColouring plain = colour_chunk_demands(demands);
  const ChunkColouring c = colour_chunk_demands(demands, {{2, 1}, {1, 3}});
  EXPECT_EQ(c.num_chunks, 6u);
  std::vector<std::uint32_t> range;
  for (std::size_t d : {2, 1, 3}) {
    for (std::uint32_t id : c.chunks_of(d, demands[d].count)) range.push_back(id);
  }
  EXPECT_TRUE(consecutive(range)) << range[0] << " " << range[1] << " " << range[4];
  std::vector<std::uint32_t> unhinted;
  for (std::size_t d : {2, 1, 3}) {
    for (std::uint32_t id : plain.chunks_of(d, demands[d].count)) unhinted.push_back(id);
  }
  EXPECT_FALSE(consecutive(unhinted));
}

// Colouring again with the count known: a demand that no released run holds whole takes new
// consecutive chunks below the count. Released {1} and {3} at time 5, the count 6 (reached at
// time 10): the demand of two takes 4-5, not 1 and 3.
TEST(ChunkColouring, KnowingTheCountADemandTakesNewChunksRatherThanPieces) {
  const std::vector<ChunkDemand> demands = {{0, 10, 1}, {0, 5, 1}, {0, 10, 1}, {0, 5, 1},
                                            {5, 10, 2}, {10, 20, 6}};
  const ChunkColouring plain = colour_chunk_demands(demands);
  ASSERT_EQ(plain.num_chunks, 6u);
  EXPECT_FALSE(consecutive(plain.chunks_of(4, 2)));
  const ChunkColouring whole = colour_chunk_demands(demands, {}, plain.num_chunks);
  EXPECT_EQ(whole.num_chunks, 6u);
  EXPECT_EQ(std::vector<std::uint32_t>(whole.chunks_of(4, 2).begin(), whole.chunks_of(4, 2).end()),
            (std::vector<std::uint32_t>{4, 5}));
}

// With random adjacencies the colouring still never shares a chunk between demands live at
// once and uses exactly the most chunks live at once; with the count as a cap, it never shares
// either (its count may exceed the cap, which the planner then does not take).
TEST(ChunkColouring, AdjacencyNeverCostsAChunk) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<ChunkDemand> demands;
    std::vector<ChunkAdjacency> adjacent;
    for (int i = 0; i < 200; ++i) {
      const std::uint64_t start = rng() % 1000;
      demands.push_back({start, start + 1 + rng() % 200, static_cast<std::uint32_t>(1 + rng() % 5)});
      if (i > 0 && rng() % 2 == 0) adjacent.push_back({static_cast<std::size_t>(rng() % i), static_cast<std::size_t>(i)});
    }
    const ChunkColouring plain = colour_chunk_demands(demands, adjacent);
    EXPECT_EQ(plain.num_chunks, max_demanded(demands));
    const ChunkColouring capped = colour_chunk_demands(demands, adjacent, plain.num_chunks);
    EXPECT_GE(capped.num_chunks, plain.num_chunks);
    for (const ChunkColouring* c : {&plain, &capped}) {
      for (std::size_t a = 0; a < demands.size(); ++a) {
        for (std::size_t b = a + 1; b < demands.size(); ++b) {
          if (demands[a].end <= demands[b].start || demands[b].end <= demands[a].start) continue;
          for (std::uint32_t ia : c->chunks_of(a, demands[a].count)) {
            for (std::uint32_t ib : c->chunks_of(b, demands[b].count)) {
              EXPECT_NE(ia, ib) << "demands " << a << " and " << b;
            }
          }
        }
      }
    }
  }
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
