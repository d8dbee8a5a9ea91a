#include <gtest/gtest.h>

#include "planner/chunk/plan_validator.h"

namespace stalloc {
namespace {

constexpr std::uint64_t G = 1024;

PlannedSlot make_slot(std::uint64_t ordinal, std::uint64_t size, std::uint64_t start,
                      std::uint64_t end, std::uint64_t offset, std::vector<std::uint32_t> chunks) {
  PlannedSlot s;
  s.ordinal = ordinal;
  s.size = size;
  s.start = start;
  s.end = end;
  s.offset = offset;
  s.chunks = std::move(chunks);
  return s;
}

// Two slots sharing chunk 1 in disjoint byte ranges, one reusing chunk 0 later.
ChunkPlan good_plan() {
  ChunkPlan p;
  p.granularity = G;
  p.num_chunks = 3;
  p.signature = {1, 3, 10};
  p.slots.push_back(make_slot(0, G + 512, 0, 5, 0, {0, 1}));        // chunk 1 bytes [0, 512)
  p.slots.push_back(make_slot(1, 512, 2, 8, 512, {1}));             // chunk 1 bytes [512, 1024)
  p.slots.push_back(make_slot(2, 2 * G, 5, 10, 0, {0, 2}));         // chunk 0 after slot 0
  p.lower_bound_bytes = 2 * G + 512;                                // slots 1 and 2 at t = 5..8
  p.mappings = 5;
  return p;
}

bool has_error(const PlanValidation& v, const std::string& needle) {
  for (const auto& e : v.errors) {
    if (e.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(PlanValidator, AcceptsAValidPlanAndRecomputesFigures) {
  const PlanValidation v = validate_plan(good_plan());
  EXPECT_TRUE(v.ok) << (v.errors.empty() ? "" : v.errors[0]);
  EXPECT_EQ(v.lower_bound_bytes, 2 * G + 512);
  EXPECT_EQ(v.peak_chunks_in_use, 3u);
  EXPECT_EQ(v.peak_physical_bytes, 3 * G);
}

TEST(PlanValidator, FindsBytesSharedByLiveSlots) {
  ChunkPlan p = good_plan();
  p.slots[1].offset = 256;  // chunk 1 bytes [256, 768) while slot 0 holds [0, 512)
  const PlanValidation v = validate_plan(p);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(has_error(v, "slots 0 and 1 are live together and overlap in chunk 1")) << v.errors[0];
}

TEST(PlanValidator, FindsAChunkReusedTooEarly) {
  ChunkPlan p = good_plan();
  p.slots[2].start = 4;
  p.lower_bound_bytes = 3 * G + 1024;
  const PlanValidation v = validate_plan(p);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(has_error(v, "overlap in chunk 0"));
}

TEST(PlanValidator, FindsASlotUsingOneChunkTwice) {
  ChunkPlan p = good_plan();
  p.slots[2].chunks = {2, 2};
  EXPECT_TRUE(has_error(validate_plan(p), "overlap in chunk 2"));
}

TEST(PlanValidator, ChecksShapes) {
  ChunkPlan p = good_plan();
  p.slots[0].chunks = {0, 7};
  EXPECT_TRUE(has_error(validate_plan(p), "chunk 7 is not below num_chunks 3"));
  p = good_plan();
  p.slots[1].offset = G;
  EXPECT_TRUE(has_error(validate_plan(p), "offset 1024 is not below 1024"));
  p = good_plan();
  p.slots[0].chunks = {0};
  EXPECT_TRUE(has_error(validate_plan(p), "1 chunks, its range needs 2"));
  p = good_plan();
  p.slots[2].end = 16;  // carried 6 requests into the next iteration: meets its own next instance at 5
  EXPECT_TRUE(has_error(validate_plan(p), "is not inside the iteration"));
  p = good_plan();
  p.slots[2].start = 10;
  EXPECT_TRUE(has_error(validate_plan(p), "is not inside the iteration"));
  p = good_plan();
  std::swap(p.slots[0].ordinal, p.slots[1].ordinal);
  EXPECT_TRUE(has_error(validate_plan(p), "does not follow"));
}

// A slot carried into the next iteration, [start, requests + f), is live over [0, f) too.
TEST(PlanValidator, CarriedSlotsWrapAroundTheIteration) {
  ChunkPlan p = good_plan();
  p.slots[2].end = 11;  // chunk 0 again over [0, 1), while slot 0 holds it
  EXPECT_TRUE(has_error(validate_plan(p), "overlap in chunk 0"));
  p = good_plan();
  p.slots[1].end = 12;  // chunk 1's bytes [512, 1024) over [0, 2) too: slot 0 has [0, 512)
  const PlanValidation v = validate_plan(p);
  EXPECT_TRUE(v.ok) << (v.errors.empty() ? "" : v.errors[0]);
  EXPECT_EQ(v.lower_bound_bytes, 2 * G + 512);
}

TEST(PlanValidator, ChecksFiguresAgainstTheSlots) {
  ChunkPlan p = good_plan();
  p.lower_bound_bytes = 1;
  EXPECT_TRUE(has_error(validate_plan(p), "lower_bound_bytes is 1"));
  p = good_plan();
  p.mappings = 4;
  EXPECT_TRUE(has_error(validate_plan(p), "mappings is 4"));
}

TEST(PlanValidator, ChecksDynamicBudgets) {
  ChunkPlan p = good_plan();
  PlannedSlot d = make_slot(3, 4 * G, 8, 10, 0, {});
  d.kind = SlotKind::Dynamic;
  d.budget_chunks = {1};  // chunk 1 is idle from 8 on
  p.slots.push_back(d);
  EXPECT_TRUE(validate_plan(p).ok);
  p.slots.back().budget_chunks = {0};  // slot 2 holds chunk 0 until 10
  EXPECT_TRUE(has_error(validate_plan(p), "budget chunk 0 is busy"));
  p.slots.back().budget_chunks = {};
  p.slots.back().chunks = {1};
  EXPECT_TRUE(has_error(validate_plan(p), "dynamic slot 3 has planned chunks"));
}

TEST(PlanValidator, ReportsAtMostTwentyErrors) {
  ChunkPlan p = good_plan();
  for (int i = 0; i < 50; ++i) p.slots.push_back(make_slot(10 + static_cast<std::uint64_t>(i), G, 0, 10, 0, {99}));
  const PlanValidation v = validate_plan(p);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.errors.size(), 20u);
}

}  // namespace
}  // namespace stalloc
