#include "sim/run_extension.h"

#include <gtest/gtest.h>

#include "trace/trace.h"
#include "trace/trace_builder.h"

namespace stalloc {
namespace {

constexpr std::uint64_t MiB = 1 << 20;

std::size_t count(const Trace& t, std::uint32_t iteration, EventKind kind) {
  std::size_t n = 0;
  for (const Event& e : t.events) n += e.iteration == iteration && e.kind == kind ? 1 : 0;
  return n;
}

TEST(RunExtension, DefaultRepetitionsReachEightIterationsAndAtLeastFourCopies) {
  TraceBuilder one;
  one.free(one.alloc(MiB));
  EXPECT_EQ(default_repetitions(one.trace()), 7u);
  TraceBuilder four;
  for (std::uint32_t it = 0; it < 4; ++it) four.at(it).free(four.alloc(MiB));
  EXPECT_EQ(default_repetitions(four.trace()), 4u);
  TraceBuilder ten;
  for (std::uint32_t it = 0; it < 10; ++it) ten.at(it).free(ten.alloc(MiB));
  EXPECT_EQ(default_repetitions(ten.trace()), 4u);
  EXPECT_EQ(default_repetitions(Trace{}), 0u);
}

// A one-iteration snapshot: two blocks live at its start (seeded), a temporary made and freed,
// one block made and kept. The seeded blocks are allocated once; each copy frees the step
// before's kept block as it starts, then makes and frees the temporary and makes its own kept
// block, so that it holds what the recorded step held.
TEST(RunExtension, OneStepRepeatsItsTemporariesAndAllocatesItsLiveBlocksOnce) {
  TraceBuilder b;
  b.alloc(8 * MiB);  // seeded: weights
  b.alloc(4 * MiB);  // seeded: optimizer state
  b.trace().meta.emplace("seeded_live_blocks", std::to_string(2));
  const std::uint64_t tmp = b.alloc(2 * MiB);
  b.alloc(3 * MiB);  // made in the step and kept
  b.free(tmp);
  const Trace& recorded = b.trace();
  const Trace run = with_repeated_last_iteration(recorded, 3);
  EXPECT_EQ(validate_trace(run), "");
  ASSERT_EQ(run.events.size(), recorded.events.size() + 3 * 4);
  for (std::uint32_t copy = 1; copy <= 3; ++copy) {
    EXPECT_EQ(count(run, copy, EventKind::Alloc), 2u);
    EXPECT_EQ(count(run, copy, EventKind::Free), 2u);
  }
  EXPECT_EQ(run.events.back().time_ns, -1);
  EXPECT_EQ(lower_bound_bytes(run), lower_bound_bytes(recorded));
  EXPECT_EQ(with_repeated_last_iteration(recorded, 0), recorded);
}

// A step that frees the last step's gradient and makes its own (carried in and out, the same
// size): each copy frees the copy before's gradient and makes a new one, so one is live at a
// time, as in the recorded iterations.
TEST(RunExtension, CarriedBlocksArePairedBySizeAcrossCopies) {
  TraceBuilder b;
  std::uint64_t grad = b.alloc(6 * MiB);  // iteration 0's gradient, carried into 1
  b.next_iteration();
  const std::uint64_t act = b.alloc(5 * MiB);
  b.free(grad);
  grad = b.alloc(6 * MiB);  // carried out
  b.free(act);
  const Trace run = with_repeated_last_iteration(b.trace(), 4);
  EXPECT_EQ(validate_trace(run), "");
  for (std::uint32_t copy = 2; copy <= 5; ++copy) {
    EXPECT_EQ(count(run, copy, EventKind::Alloc), 2u);
    EXPECT_EQ(count(run, copy, EventKind::Free), 2u);
  }
  // Live at the end: the last copy's gradient alone.
  std::uint64_t live = 0;
  for (const Event& e : run.events) live += e.kind == EventKind::Alloc ? 1 : 0;
  for (const Event& e : run.events) live -= e.kind == EventKind::Free ? 1 : 0;
  EXPECT_EQ(live, 1u);
  EXPECT_EQ(lower_bound_bytes(run), lower_bound_bytes(b.trace()));
  // The free of each copy names the block the copy before made.
  std::uint64_t made_before = grad;
  for (std::uint32_t copy = 2; copy <= 5; ++copy) {
    std::uint64_t freed = 0, made = 0;
    for (const Event& e : run.events) {
      if (e.iteration != copy || e.size != 6 * MiB) continue;
      (e.kind == EventKind::Free ? freed : made) = e.id;
    }
    EXPECT_EQ(freed, made_before) << copy;
    made_before = made;
  }
}

// A free of a block the step never made and that no block made in the step can stand for:
// only the recorded step frees it.
TEST(RunExtension, AnUnpairedCarriedInFreeIsNotRepeated) {
  TraceBuilder b;
  const std::uint64_t old = b.alloc(7 * MiB);
  b.next_iteration();
  b.free(old);
  b.free(b.alloc(MiB));
  const Trace run = with_repeated_last_iteration(b.trace(), 2);
  EXPECT_EQ(validate_trace(run), "");
  EXPECT_EQ(count(run, 2, EventKind::Free), 1u);
  EXPECT_EQ(count(run, 3, EventKind::Alloc), 1u);
}

// Outputs kept at the end of a step, made after its largest temporary is gone (an inference
// loop's results): kept across the copies they would add up to more than the step ever held;
// freed as the next copy starts, every copy peaks where the step did.
TEST(RunExtension, BlocksKeptAtTheEndOfAStepDoNotRaiseThePeak) {
  TraceBuilder b;
  b.free(b.alloc(10 * MiB));  // the step's largest temporary
  b.alloc(4 * MiB);           // outputs, kept
  b.alloc(4 * MiB);
  const Trace run = with_repeated_last_iteration(b.trace(), 5);
  EXPECT_EQ(validate_trace(run), "");
  EXPECT_EQ(lower_bound_bytes(run), 10 * MiB);
}

}  // namespace
}  // namespace stalloc
