#include "src/pool_runs.h"

#include <gtest/gtest.h>

#include <vector>

namespace stalloc {
namespace {

using Runs = std::vector<std::uint32_t>;
using Chunks = std::vector<std::uint32_t>;

Runs runs_of(const std::vector<Chunks>& views, std::uint32_t first, std::uint32_t count,
             const std::vector<bool>& alone = {}, std::uint32_t max_length = kMaxRunChunks) {
  std::vector<const Chunks*> pointers;
  for (const Chunks& v : views) pointers.push_back(&v);
  return pool_runs(pointers, alone, first, count, max_length);
}

// Chunks share a handle only where every view that holds one holds the others next to it, in
// order: a view of 1 and 2 inside one of 0..3 cuts the run before 1 and after 2.
TEST(PoolRuns, ARunEndsWhereAViewHoldsAChunkWithoutItsNeighbour) {
  EXPECT_EQ(runs_of({{0, 1, 2, 3}}, 0, 4), (Runs{4}));
  EXPECT_EQ(runs_of({{0, 1, 2, 3}, {1, 2}}, 0, 4), (Runs{1, 2, 1}));
  EXPECT_EQ(runs_of({{0, 1, 2, 3}, {2, 3, 0, 1}}, 0, 4), (Runs{2, 2}));
  EXPECT_EQ(runs_of({{3, 2, 1, 0}}, 0, 4), (Runs{1, 1, 1, 1}));  // held in reverse
  EXPECT_EQ(runs_of({{0, 1}, {2, 3}}, 0, 4), (Runs{2, 2}));     // never held together
}

// Chunks no view holds, those that must stay alone (a Dynamic budget, lent a page at a time),
// and the length limit cut runs too; chunks below `first` (the pool has them) are not runs.
TEST(PoolRuns, UnheldAloneAndExistingChunksAreNotInRuns) {
  EXPECT_EQ(runs_of({{0, 1, 2, 3, 4, 5}}, 0, 8), (Runs{6, 1, 1}));
  std::vector<bool> alone(6, false);
  alone[2] = true;
  EXPECT_EQ(runs_of({{0, 1, 2, 3, 4, 5}}, 0, 6, alone), (Runs{2, 1, 3}));
  EXPECT_EQ(runs_of({{0, 1, 2, 3, 4, 5}}, 0, 6, {}, 4), (Runs{4, 2}));
  EXPECT_EQ(runs_of({{0, 1, 2, 3, 4, 5}}, 3, 6), (Runs{3}));
  EXPECT_EQ(runs_of({{0, 1, 2, 3, 4, 5}}, 6, 6), (Runs{}));
}

}  // namespace
}  // namespace stalloc
