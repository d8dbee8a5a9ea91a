#include "src/pool_runs.h"

#include <gtest/gtest.h>

#include <vector>

#include "src/run_relabelling.h"
#include "tests/runtime/runtime_test_support.h"

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

// A plan renumbered onto a pool of runs 4, 2 and three chunks alone: its run of four onto the
// pool's four, its pair onto the pool's pair, its chunks alone onto the pool's, never the held
// one; what is left goes onto a run it may split, then past the pool's end.
TEST(RunRelabelling, PlacesThePlansRunsOnThePoolsAndAvoidsHeldChunks) {
  testing_support::PoolOfRuns f({4, 2, 1, 1, 1});
  const PlanPool& pool = f.pool;
  const std::vector<Chunks> plan{{0, 1}, {2, 3, 4, 5}, {6}, {7}};
  std::vector<const Chunks*> views;
  for (const Chunks& v : plan) views.push_back(&v);
  PoolClaims claims;
  claims.held.assign(9, false);
  claims.held[7] = true;
  std::vector<std::uint32_t> split;
  EXPECT_EQ(relabel_onto_runs(views, {}, 8, pool, claims, &split),
            (std::vector<std::uint32_t>{4, 5, 0, 1, 2, 3, 6, 8}));
  EXPECT_TRUE(split.empty());

  // Five chunks alone and one pair: the pool's pair is used, its run of four is not; splittable,
  // it is split for the chunks left, else they go past the pool's end.
  const std::vector<Chunks> apart{{0}, {1}, {2}, {3}, {4}, {5, 6}};
  std::vector<const Chunks*> apart_views;
  for (const Chunks& v : apart) apart_views.push_back(&v);
  claims.splittable.assign(9, false);
  std::vector<std::uint32_t> none;
  EXPECT_EQ(relabel_onto_runs(apart_views, {}, 7, pool, claims, &none),
            (std::vector<std::uint32_t>{6, 8, 9, 10, 11, 4, 5}));
  EXPECT_TRUE(none.empty());
  claims.splittable[0] = true;
  EXPECT_EQ(relabel_onto_runs(apart_views, {}, 7, pool, claims, &split),
            (std::vector<std::uint32_t>{0, 1, 2, 3, 6, 4, 5}));
  EXPECT_EQ(split, (std::vector<std::uint32_t>{0}));
}

}  // namespace
}  // namespace stalloc
