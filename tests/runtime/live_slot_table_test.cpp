#include "src/live_slot_table.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace stalloc {
namespace {

InstalledPlan* plan_tag(std::uintptr_t n) { return reinterpret_cast<InstalledPlan*>(n * 64); }

TEST(LiveSlotTable, FindsWhatWasInsertedAndForgetsWhatWasTaken) {
  LiveSlotTable table;
  table.insert(0x7f0000200000, {plan_tag(1), 5});
  table.insert(0x7f0000400100, {plan_tag(2), 9});
  EXPECT_EQ(table.find(0x7f0000200000).slot, 5u);
  EXPECT_EQ(table.find(0x7f0000400100).plan, plan_tag(2));
  EXPECT_EQ(table.find(0x7f0000400000).plan, nullptr);
  EXPECT_EQ(table.take(0x7f0000200000).slot, 5u);
  EXPECT_EQ(table.find(0x7f0000200000).plan, nullptr);
  EXPECT_EQ(table.take(0x7f0000200000).plan, nullptr);
  EXPECT_EQ(table.take(0).plan, nullptr);
  EXPECT_EQ(table.size(), 1u);
}

// Addresses as the runtime hands them out (2 MiB chunks, tensors at offsets inside them), so
// that many share a home; inserts and takes at random against a map, through several growths
// and shrinking back: every lookup agrees, including after the deletions that shift runs.
TEST(LiveSlotTable, AgreesWithAMapThroughGrowthAndDeletions) {
  LiveSlotTable table;
  std::unordered_map<vmm::DevicePtr, std::uint32_t> model;
  std::vector<vmm::DevicePtr> live;
  std::mt19937_64 rng(11);
  auto address = [&] {
    return vmm::DevicePtr{0x7f0000000000} + (rng() % 4096) * (2u << 20) + (rng() % 4) * 512;
  };
  for (int step = 0; step < 200000; ++step) {
    // Grow to ~3,000 live entries in the first half, shrink in the second.
    const bool add = live.empty() || (rng() % 100) < (step < 100000 ? 60u : 40u);
    if (add) {
      const vmm::DevicePtr a = address();
      if (model.count(a) != 0) continue;
      const auto slot = static_cast<std::uint32_t>(step);
      table.insert(a, {plan_tag(1 + a % 7), slot});
      model[a] = slot;
      live.push_back(a);
    } else {
      const std::size_t i = rng() % live.size();
      const vmm::DevicePtr a = live[i];
      const LiveSlot taken = table.take(a);
      ASSERT_EQ(taken.plan, plan_tag(1 + a % 7)) << "step " << step;
      ASSERT_EQ(taken.slot, model[a]) << "step " << step;
      model.erase(a);
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_EQ(table.size(), model.size());
    // A few lookups of live and absent addresses.
    for (int q = 0; q < 4; ++q) {
      const vmm::DevicePtr a = q % 2 == 0 && !live.empty() ? live[rng() % live.size()] : address();
      const auto it = model.find(a);
      const LiveSlot found = table.find(a);
      if (it == model.end()) {
        ASSERT_EQ(found.plan, nullptr) << "step " << step;
      } else {
        ASSERT_EQ(found.slot, it->second) << "step " << step;
      }
    }
  }
  EXPECT_LT(model.size(), 1000u);
}

}  // namespace
}  // namespace stalloc
