#include <gtest/gtest.h>

#include <sstream>

#include "common/error.h"
#include "planner/chunk/chunk_plan.h"
#include "planner/chunk/plan_validator.h"
#include "tests/planner/chunk/chunk_plan_test_traces.h"

namespace stalloc {
namespace {

void expect_same(const ChunkPlan& a, const ChunkPlan& b) {
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.granularity, b.granularity);
  EXPECT_EQ(a.signature, b.signature);
  EXPECT_EQ(a.iteration, b.iteration);
  EXPECT_EQ(a.num_chunks, b.num_chunks);
  EXPECT_EQ(a.windows, b.windows);
  EXPECT_EQ(a.remainder, b.remainder);
  EXPECT_EQ(a.lower_bound_bytes, b.lower_bound_bytes);
  EXPECT_EQ(a.dynamic_peak_bytes, b.dynamic_peak_bytes);
  EXPECT_EQ(a.mappings, b.mappings);
  EXPECT_EQ(a.vmm_ops_per_iteration, b.vmm_ops_per_iteration);
  ASSERT_EQ(a.slots.size(), b.slots.size());
  for (std::size_t i = 0; i < a.slots.size(); ++i) {
    const PlannedSlot& x = a.slots[i];
    const PlannedSlot& y = b.slots[i];
    EXPECT_EQ(x.ordinal, y.ordinal);
    EXPECT_EQ(x.size, y.size);
    EXPECT_EQ(x.stream, y.stream);
    EXPECT_EQ(x.start, y.start);
    EXPECT_EQ(x.end, y.end);
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.offset, y.offset);
    EXPECT_EQ(x.chunks, y.chunks);
    EXPECT_EQ(x.budget_chunks, y.budget_chunks);
  }
}

ChunkPlan sample_plan(PlanMode mode) {
  Trace t = testing::random_training_trace(9, 2, 80);
  for (Event& e : t.events) {
    if (e.kind == EventKind::Alloc && e.id % 17 == 0) e.dynamic = true;
  }
  PlanOptions options;
  options.mode = mode;
  ChunkPlan plan = plan_iteration(t, 1, options);
  EXPECT_TRUE(validate_plan(plan).ok);
  return plan;
}

TEST(ChunkPlanIo, RoundTripsEveryMode) {
  for (PlanMode mode : {PlanMode::Alias, PlanMode::Windowed, PlanMode::Offset}) {
    const ChunkPlan plan = sample_plan(mode);
    std::stringstream text;
    write_plan(plan, text);
    expect_same(plan, read_plan(text, "mem.plan"));
  }
}

TEST(ChunkPlanIo, ChunkListsAreWrittenAsRuns) {
  ChunkPlan plan;
  plan.granularity = testing::kG;
  plan.num_chunks = 10;
  plan.signature = {0xabc, 1, 2};
  PlannedSlot s;
  s.size = 5 * testing::kG;
  s.start = 0;
  s.end = 2;
  s.chunks = {0, 1, 2, 7, 9};
  plan.slots.push_back(s);
  std::stringstream text;
  write_plan(plan, text);
  EXPECT_NE(text.str().find(" 0-2,7,9 -\n"), std::string::npos) << text.str();
  EXPECT_EQ(read_plan(text, "mem.plan").slots[0].chunks, s.chunks);
}

TEST(ChunkPlanIo, FilesRoundTrip) {
  const ChunkPlan plan = sample_plan(PlanMode::Alias);
  const std::string path = ::testing::TempDir() + "/chunk_plan_io_test.plan";
  write_plan(plan, path);
  expect_same(plan, read_plan(path));
  EXPECT_THROW(read_plan(::testing::TempDir() + "/no/such.plan"), UsageError);
}

// Replaces line `line` (1-based) of a valid plan file and expects a ParseError on it.
void expect_error_at(std::size_t line, const std::string& replacement, const std::string& needle) {
  static const std::string valid = [] {
    std::ostringstream out;
    write_plan(sample_plan(PlanMode::Alias), out);
    return out.str();
  }();
  std::istringstream text(valid);
  std::string out, l;
  std::size_t n = 0;
  while (std::getline(text, l)) {
    ++n;
    out += (n == line ? replacement : l) + "\n";
  }
  std::istringstream in(out);
  try {
    read_plan(in, "bad.plan");
    FAIL() << "no error for line " << line << " = '" << replacement << "'";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.file(), "bad.plan");
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ChunkPlanIo, BadFilesNameTheLineAndWhatWasExpected) {
  expect_error_at(1, "stalloc-plan 99", "unsupported plan format version");
  expect_error_at(1, "stalloc-trace 1", "expected 'stalloc-plan VERSION'");
  expect_error_at(2, "mode paper", "expected 'mode alias|windowed|offset'");
  expect_error_at(3, "granularity two", "expected an unsigned integer");
  expect_error_at(4, "signature xyz allocations 1 requests 2", "expected 'signature HEX");
  expect_error_at(7, "windows 0", "windows must be at least 1");
  expect_error_at(8, "remainder sideways", "remainder");
  expect_error_at(14, "slot 0 1 0 0 1 static 0 0-5000000 -", "is not below num_chunks");
  expect_error_at(14, "slot 0 1 0 5 1 static 0 - -", "is not after its start");
  expect_error_at(14, "slot 0 1 0 0 1 huge 0 - -", "expected static, small or dynamic");
  expect_error_at(14, "slot 0 1", "expected 'slot ORDINAL");
  expect_error_at(14, "slot 0 1 0 0 1 static 0 3-1 -", "descending");
  expect_error_at(14, "slot 0 1 0 0 1 static 0 1,,2 -", "expected an unsigned integer");
}

TEST(ChunkPlanIo, HostileSizesAreRefusedNotAllocated) {
  std::istringstream huge(
      "stalloc-plan 1\nmode alias\ngranularity 2097152\n"
      "signature 1 allocations 18446744073709551615 requests 2\niteration 0\n"
      "num_chunks 4294967296\nwindows 1\nremainder widened\nlower_bound_bytes 0\n"
      "dynamic_peak_bytes 0\nmappings 0\nvmm_ops_per_iteration 0\n"
      "slots 18446744073709551615\nslot 0 1 0 0 1 static 0 0-4294967295 -\n");
  try {
    read_plan(huge, "huge.plan");
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.line(), 14u);
    EXPECT_NE(std::string(e.what()).find("chunk ids"), std::string::npos) << e.what();
  }
}

TEST(ChunkPlanIo, TruncatedFilesAreReported) {
  std::stringstream text;
  write_plan(sample_plan(PlanMode::Alias), text);
  std::string s = text.str();
  s.resize(s.size() / 2);
  s.resize(s.rfind('\n') + 1);
  std::istringstream in(s);
  EXPECT_THROW(read_plan(in, "cut.plan"), ParseError);
  std::istringstream empty("");
  EXPECT_THROW(read_plan(empty, "empty.plan"), ParseError);
}

}  // namespace
}  // namespace stalloc
