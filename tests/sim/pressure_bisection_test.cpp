#include <gtest/gtest.h>

#include <cstdint>

#include "common/error.h"
#include "common/units.h"
#include "workload/generator.h"
#include "sim/pressure_test.h"

namespace stalloc {
namespace {

// A probe for an allocator that needs exactly `need` bytes and reports `peak` when unlimited.
CapacityProbe needs(std::uint64_t need, std::uint64_t peak) {
  return [need, peak](std::uint64_t capacity, std::uint64_t* peak_reserved) {
    *peak_reserved = peak;
    return capacity == 0 || capacity >= need;
  };
}

TEST(PressureBisection, FindsTheSmallestFittingMultipleOfTheStep) {
  const PressureResult r = find_min_capacity("a", 30 * MiB, 2 * MiB, needs(37 * MiB, 40 * MiB));
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.min_capacity_bytes, 38 * MiB);
  EXPECT_DOUBLE_EQ(r.ratio_to_lower_bound, 38.0 / 30.0);
  EXPECT_EQ(r.unlimited_peak_reserved_bytes, 40 * MiB);
  // The unlimited run, the peak (40 fits), then 34, 36, 38 or fewer: about log2 of the range.
  EXPECT_GE(r.replays, 3u);
  EXPECT_LE(r.replays, 6u);
}

TEST(PressureBisection, AnAllocatorAtTheLowerBoundNeedsNoBisection) {
  const PressureResult r = find_min_capacity("a", 8 * MiB, 2 * MiB, needs(8 * MiB, 8 * MiB));
  EXPECT_EQ(r.min_capacity_bytes, 8 * MiB);
  EXPECT_EQ(r.replays, 2u);
}

// A policy that needs more under pressure than it reserved unlimited: the upper end grows.
TEST(PressureBisection, GrowsTheUpperEndWhenThePeakDoesNotFit) {
  const PressureResult r = find_min_capacity("a", 10 * MiB, 2 * MiB, needs(51 * MiB, 12 * MiB));
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.min_capacity_bytes, 52 * MiB);
}

TEST(PressureBisection, ReportsWhenNothingFits) {
  const PressureResult r = find_min_capacity("a", 10 * MiB, 2 * MiB, needs(UINT64_MAX, 12 * MiB));
  EXPECT_FALSE(r.found);
  EXPECT_THROW(find_min_capacity("a", 1, 0, needs(1, 1)), UsageError);
}

TEST(PressureBisection, ModelsOnTheTinyPresetFitAtOrAboveTheLowerBound) {
  const Trace trace = generate_trace(preset("tiny"));
  const std::uint64_t lb = lower_bound_bytes(trace);
  for (const char* model : {"pytorch", "stalloc"}) {
    SCOPED_TRACE(model);
    const PressureResult r = find_min_capacity(model, lb, 2 * MiB, model_capacity_probe(trace, model, {}));
    ASSERT_TRUE(r.found);
    EXPECT_GE(r.min_capacity_bytes, lb);
    EXPECT_EQ(r.min_capacity_bytes % (2 * MiB), 0u);
    EXPECT_LE(r.min_capacity_bytes, r.unlimited_peak_reserved_bytes + 2 * MiB);
    std::uint64_t peak = 0;
    EXPECT_TRUE(model_capacity_probe(trace, model, {})(r.min_capacity_bytes, &peak));
    EXPECT_FALSE(model_capacity_probe(trace, model, {})(r.min_capacity_bytes - 2 * MiB, &peak));
  }
}

}  // namespace
}  // namespace stalloc
