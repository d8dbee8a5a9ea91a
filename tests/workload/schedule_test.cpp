#include "workload/generator_schedule.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace stalloc {
namespace {

// forward_backward_pipelining_without_interleaving with pp = 4, m = 8: rank r runs
// min(pp - r - 1, m) warm-up forwards, then forward/backward pairs, then the remaining backwards.
TEST(Schedule, OneFOneBOrderForEveryRank) {
  const char* expected[4] = {
      "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
      "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
  };
  for (std::uint64_t rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(schedule_string(pipeline_schedule(4, rank, 8, 1), 1), expected[rank]) << "rank " << rank;
  }
}

TEST(Schedule, OneFOneBWithFewerMicrobatchesThanStages) {
  // Warm-up is capped by m: rank 0 of pp 4 with 2 micro-batches runs both forwards first.
  EXPECT_EQ(schedule_string(pipeline_schedule(4, 0, 2, 1), 1), "F0 F1 B0 B1");
}

// forward_backward_pipelining_with_interleaving with pp = 2, vpp = 2, m = 4 (8 virtual
// micro-batches). Warm-up: rank 0: (2-0-1)*2 + (2-1)*2 = 4, rank 1: 0 + 2 = 2. Forward k runs
// chunk (k mod 4) / 2 on micro-batch (k / 4)*2 + k mod 2; backward k runs the chunks in reverse.
// "Fc.m" = forward of chunk c, micro-batch m.
TEST(Schedule, InterleavedOrderForEveryRank) {
  EXPECT_EQ(schedule_string(pipeline_schedule(2, 0, 4, 2), 2),
            "F0.0 F0.1 F1.0 F1.1 "
            "F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 "
            "B1.2 B1.3 B0.2 B0.3");
  EXPECT_EQ(schedule_string(pipeline_schedule(2, 1, 4, 2), 2),
            "F0.0 F0.1 "
            "F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 "
            "B0.2 B0.3");
}

TEST(Schedule, InterleavedWithMicrobatchesEqualToStagesRunsAllForwardsFirst) {
  const ScheduleShape s = schedule_shape(2, 1, 2, 2);
  EXPECT_TRUE(s.all_warmup);
  EXPECT_EQ(s.warmup, 4u);
  EXPECT_EQ(schedule_string(pipeline_schedule(2, 1, 2, 2), 2), "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1");
}

TEST(Schedule, ModelChunkIdUsesPythonModulo) {
  // Megatron asks for get_model_chunk_id(k - (pp - 1)) with k < pp - 1 on the first rank.
  EXPECT_EQ(model_chunk_for(-1, true, 2, 2), 1u);   // (-1 mod 4) = 3 -> chunk 1
  EXPECT_EQ(model_chunk_for(-1, false, 2, 2), 0u);  // reversed
  EXPECT_EQ(model_chunk_for(5, true, 2, 2), 0u);
}

TEST(Schedule, EveryStepAppearsOnceInEachDirection) {
  const auto steps = pipeline_schedule(4, 1, 8, 2);
  ASSERT_EQ(steps.size(), 2u * 8u * 2u);
  int seen[2][2][8] = {};
  for (const PipelineStep& s : steps) ++seen[s.forward][s.model_chunk][s.microbatch];
  for (auto& dir : seen) {
    for (auto& chunk : dir) {
      for (int n : chunk) EXPECT_EQ(n, 1);
    }
  }
}

TEST(Schedule, RejectsImpossibleShapes) {
  EXPECT_THROW(pipeline_schedule(2, 2, 4, 1), UsageError);
  EXPECT_THROW(pipeline_schedule(4, 0, 6, 2), UsageError);  // 6 micro-batches, pp 4
}

}  // namespace
}  // namespace stalloc
