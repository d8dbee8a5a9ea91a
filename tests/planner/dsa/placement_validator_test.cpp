#include "planner/dsa/placement_validator.h"

#include <gtest/gtest.h>

namespace stalloc {
namespace {

PlacedBuffer buffer(std::uint64_t id, std::uint64_t lower, std::uint64_t upper, std::uint64_t size,
                    std::uint64_t offset, std::uint64_t alignment = 1) {
  return {id, lower, upper, size, alignment, offset};
}

TEST(PlacementValidator, AcceptsDisjointPlacementAndComputesPeak) {
  const auto report = validate_placement(
      {buffer(1, 0, 10, 100, 0), buffer(2, 0, 10, 50, 100), buffer(3, 10, 20, 200, 0)});
  EXPECT_TRUE(report.ok) << report.error;
  EXPECT_EQ(report.peak_bytes, 200u);
}

TEST(PlacementValidator, HalfOpenLifetimesMayShareAddresses) {
  const auto report = validate_placement({buffer(1, 0, 5, 64, 0), buffer(2, 5, 9, 64, 0)});
  EXPECT_TRUE(report.ok) << report.error;
  EXPECT_EQ(report.peak_bytes, 64u);
}

TEST(PlacementValidator, ReportsOverlapFromAbove) {
  const auto report = validate_placement({buffer(7, 0, 10, 100, 0), buffer(8, 5, 15, 10, 99)});
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_id, 7u);
  EXPECT_EQ(report.second_id, 8u);
  EXPECT_NE(report.error.find("overlaps"), std::string::npos);
  EXPECT_EQ(report.peak_bytes, 109u);
}

TEST(PlacementValidator, ReportsOverlapFromBelow) {
  const auto report = validate_placement({buffer(1, 0, 10, 100, 50), buffer(2, 3, 4, 60, 0)});
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_id, 1u);
  EXPECT_EQ(report.second_id, 2u);
}

TEST(PlacementValidator, FindsConflictHiddenBehindNeighbours) {
  // Buffer 3 sits between 1 and 2 in address order only at time 6, after 4 has gone.
  const auto report = validate_placement({buffer(1, 0, 10, 10, 0), buffer(2, 0, 10, 10, 30),
                                          buffer(4, 0, 5, 10, 10), buffer(3, 6, 8, 15, 12)});
  EXPECT_TRUE(report.ok) << report.error;
  const auto bad = validate_placement({buffer(1, 0, 10, 10, 0), buffer(2, 0, 10, 10, 30),
                                       buffer(4, 0, 7, 10, 10), buffer(3, 6, 8, 15, 12)});
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.first_id, 4u);
  EXPECT_EQ(bad.second_id, 3u);
}

TEST(PlacementValidator, IdenticalOffsetsConflict) {
  const auto report = validate_placement({buffer(1, 0, 10, 8, 16), buffer(2, 2, 3, 8, 16)});
  EXPECT_FALSE(report.ok);
}

TEST(PlacementValidator, RejectsMisalignedOffset) {
  const auto report = validate_placement({buffer(5, 0, 10, 100, 100, 64)});
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_id, 5u);
  EXPECT_NE(report.error.find("aligned"), std::string::npos);
}

TEST(PlacementValidator, ZeroSizedBuffersNeverConflict) {
  const auto report = validate_placement({buffer(1, 0, 10, 100, 0), buffer(2, 0, 10, 0, 50)});
  EXPECT_TRUE(report.ok) << report.error;
}

TEST(PlacementValidator, RejectsOffsetPlusSizeOverflow) {
  const auto report = validate_placement({buffer(1, 0, 10, 16, UINT64_MAX - 8)});
  EXPECT_FALSE(report.ok);
}

}  // namespace
}  // namespace stalloc
