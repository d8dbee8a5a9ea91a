#include <gtest/gtest.h>

#include "src/chunk_relocation.h"

namespace stalloc {
namespace {

TEST(ChunkRelocation, RenumbersOntoTheChunksNotHeldInOrder) {
  ChunkPlan plan;
  plan.num_chunks = 5;
  PlannedSlot a;
  a.chunks = {0, 1, 2};
  PlannedSlot b;
  b.chunks = {3, 4};
  b.budget_chunks = {4};
  plan.slots = {a, b};
  // Pool chunks 1 and 3 are held; 7 is beyond where the plan ends and costs nothing.
  std::vector<bool> held(8, false);
  held[1] = held[3] = held[7] = true;
  EXPECT_EQ(relocate_around(plan, held), 2u);
  EXPECT_EQ(plan.slots[0].chunks, (std::vector<std::uint32_t>{0, 2, 4}));
  EXPECT_EQ(plan.slots[1].chunks, (std::vector<std::uint32_t>{5, 6}));
  EXPECT_EQ(plan.slots[1].budget_chunks, (std::vector<std::uint32_t>{6}));
  EXPECT_EQ(plan.num_chunks, 7u);
}

TEST(ChunkRelocation, NothingHeldLeavesThePlanAsItWas) {
  ChunkPlan plan;
  plan.num_chunks = 2;
  PlannedSlot a;
  a.chunks = {0, 1};
  plan.slots = {a};
  EXPECT_EQ(relocate_around(plan, std::vector<bool>(2, false)), 0u);
  EXPECT_EQ(plan.slots[0].chunks, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(plan.num_chunks, 2u);
}

}  // namespace
}  // namespace stalloc
