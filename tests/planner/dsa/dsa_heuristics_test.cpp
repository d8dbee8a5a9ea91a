#include "planner/dsa/dsa_heuristics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "planner/dsa/dsa_conflict_index.h"
#include "planner/dsa/dsa_generator.h"
#include "planner/dsa/dsa_occupancy.h"
#include "tests/planner/dsa/dsa_test_util.h"

namespace stalloc::dsa_detail {
namespace {

TEST(DsaConflictIndex, MatchesAllPairs) {
  const auto buffers = dsa_test::random_buffers(400, 17);
  const DsaConflictIndex index(buffers);
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    std::vector<std::size_t> expected;
    for (std::size_t j = 0; j < buffers.size(); ++j) {
      if (j != i && buffers[i].lower < buffers[j].upper && buffers[j].lower < buffers[i].upper) {
        expected.push_back(j);
      }
    }
    std::vector<std::size_t> found;
    index.for_each_conflict(i, [&](std::size_t j) { found.push_back(j); });
    std::sort(found.begin(), found.end());
    ASSERT_EQ(found, expected) << "buffer " << i;
    EXPECT_EQ(index.degree(i), expected.size());
  }
}

TEST(DsaHeuristics, EveryPortfolioMemberIsValid) {
  const auto buffers = dsa_test::random_buffers(1500, 23, 64);
  const DsaConflictIndex index(buffers);
  for (const PortfolioMember& member : default_portfolio()) {
    const auto order = make_order(buffers, index, member.ordering);
    ASSERT_EQ(order.size(), buffers.size());
    const auto offsets = place_in_order(buffers, order, member.placement);
    const auto report = dsa_test::check(buffers, offsets);
    EXPECT_TRUE(report.ok) << member_name(member) << ": " << report.error;
    EXPECT_EQ(report.peak_bytes, placement_peak(buffers, offsets));
  }
}

TEST(DsaConflictIndex, OverlappingAnIntervalMatchesAllBuffers) {
  const auto buffers = dsa_test::random_buffers(400, 19);
  const DsaConflictIndex index(buffers);
  std::mt19937_64 rng(5);
  for (int round = 0; round < 200; ++round) {
    const std::uint64_t lower = rng() % 1700;
    const std::uint64_t upper = lower + rng() % 60;  // empty intervals too
    std::vector<std::size_t> expected;
    for (std::size_t j = 0; j < buffers.size(); ++j) {
      if (lower < upper && buffers[j].lower < upper && lower < buffers[j].upper) {
        expected.push_back(j);
      }
    }
    std::vector<std::size_t> found;
    index.for_each_overlapping(lower, upper, [&](std::size_t j) { found.push_back(j); });
    std::sort(found.begin(), found.end());
    ASSERT_EQ(found, expected) << "[" << lower << ", " << upper << ")";
  }
}

// The occupancy tree finds the same gaps as visiting every conflict: same offsets, for every
// ordering and rule, with and without alignment, on irregular and random instances.
TEST(DsaHeuristics, OccupancyTreeEqualsConflictVisits) {
  std::vector<std::vector<DsaBuffer>> instances = {dsa_test::random_buffers(2000, 41),
                                                   dsa_test::random_buffers(2000, 43, 256)};
  auto irregular = generate_dsa_instance({DsaInstanceKind::Irregular, 3000, 9});
  instances.push_back(irregular);
  for (DsaBuffer& b : irregular) b.alignment = 512;
  instances.push_back(irregular);
  for (const auto& buffers : instances) {
    const DsaConflictIndex index(buffers);
    OccupancyTree tree(buffers);  // reused: cleared by each placement
    for (const PortfolioMember& member : default_portfolio()) {
      const auto order = make_order(buffers, index, member.ordering);
      EXPECT_EQ(place_in_order(buffers, order, member.placement, &tree),
                place_in_order_by_conflicts(buffers, index, order, member.placement))
          << member_name(member);
    }
  }
}

TEST(DsaHeuristics, SweepEqualsIndexPlacementInStartOrder) {
  for (std::uint64_t alignment : {1, 64}) {
    const auto buffers = dsa_test::random_buffers(3000, 31 + alignment, alignment);
    const DsaConflictIndex index(buffers);
    const auto order = make_order(buffers, index, Ordering::StartTime);
    for (Placement placement : {Placement::LowestOffset, Placement::BestFit}) {
      const auto swept = place_by_sweep(buffers, order, placement);
      EXPECT_EQ(swept, place_in_order(buffers, order, placement));
      EXPECT_EQ(swept, place_in_order_by_conflicts(buffers, index, order, placement));
      EXPECT_TRUE(dsa_test::check(buffers, swept).ok);
    }
  }
}

TEST(DsaHeuristics, LowestOffsetVersusBestFit) {
  // Long buffers at 0, 50 and 75 with short ones between them: once the short ones end, the
  // gaps [10, 50) and [60, 75) are free. A 12-byte buffer goes into the first gap with lowest
  // offset, into the tighter second one with best fit.
  std::vector<DsaBuffer> buffers = {{0, 0, 10, 10, 1}, {1, 0, 2, 40, 1},  {2, 0, 10, 10, 1},
                                    {3, 0, 2, 15, 1},  {4, 0, 10, 10, 1}, {5, 4, 6, 12, 1}};
  const std::vector<std::uint32_t> order = {0, 1, 2, 3, 4, 5};
  const auto lowest = place_in_order(buffers, order, Placement::LowestOffset);
  const auto best = place_in_order(buffers, order, Placement::BestFit);
  const std::vector<std::uint64_t> stacked = {0, 10, 50, 60, 75};
  for (std::size_t i = 0; i < stacked.size(); ++i) {
    EXPECT_EQ(lowest[i], stacked[i]);
    EXPECT_EQ(best[i], stacked[i]);
  }
  EXPECT_EQ(lowest[5], 10u);
  EXPECT_EQ(best[5], 60u);
}

TEST(DsaHeuristics, AlignmentMovesPlacementUp) {
  std::vector<DsaBuffer> buffers = {{0, 0, 10, 10, 1}, {1, 0, 10, 8, 64}};
  const auto offsets = place_in_order(buffers, {0, 1}, Placement::LowestOffset);
  EXPECT_EQ(offsets[1], 64u);
}

}  // namespace
}  // namespace stalloc::dsa_detail
