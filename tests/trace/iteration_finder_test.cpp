#include "trace/iteration_finder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trace/trace_builder.h"
#include "trace/trace_io.h"

namespace stalloc {
namespace {

// An allocation stamped at `time_ns` (-1: none); frees carry no time stamp.
std::uint64_t alloc_at(TraceBuilder& b, std::uint64_t size, std::int64_t time_ns) {
  b.set_time(time_ns);
  const std::uint64_t id = b.alloc(size);
  b.set_time(-1);
  return id;
}

// A training step over `layers` layers: forward keeps each layer's activation and frees a
// temporary, backward allocates a gradient per layer and frees the activations, the optimizer
// allocates a temporary per layer (the first step also its state, kept), then the gradients
// are freed. Returns the event index of the step's first allocation.
std::size_t training_step(TraceBuilder* b, int layers, bool first, std::int64_t t0 = -1) {
  const std::size_t start = b->trace().events.size();
  std::int64_t t = t0;
  auto tick = [&] { return t0 < 0 ? -1 : t++; };
  std::vector<std::uint64_t> acts, grads;
  for (int l = 0; l < layers; ++l) {
    acts.push_back(alloc_at(*b, 100, tick()));
    b->free(alloc_at(*b, 50, tick()));
  }
  for (int l = layers - 1; l >= 0; --l) {
    grads.push_back(alloc_at(*b, 200, tick()));
    b->free(acts[static_cast<std::size_t>(l)]);
  }
  for (int l = 0; l < layers; ++l) {
    if (first) alloc_at(*b, 400, tick());  // optimizer state, never freed
    b->free(alloc_at(*b, 300, tick()));
  }
  for (std::uint64_t g : grads) b->free(g);
  return start;
}

TEST(IterationFinder, FindsTheStepsOfATrainingRun) {
  TraceBuilder b;
  for (int w = 0; w < 4; ++w) b.alloc(1000 + static_cast<std::uint64_t>(w));  // weights
  std::vector<std::size_t> starts;
  for (int step = 0; step < 5; ++step) starts.push_back(training_step(&b, 6, step == 0));
  const IterationSplit split = find_iterations(b.trace());
  // Step 0 differs (it creates the optimizer state), steps 1..4 repeat; each allocates
  // 6 activations, 6 temporaries, 6 gradients and 6 optimizer temporaries.
  EXPECT_EQ(split.period, 24u);
  EXPECT_EQ(split.starts, std::vector<std::size_t>(starts.begin() + 1, starts.end()));

  assign_iterations(&b.trace(), split.starts);
  for (std::size_t i = 0; i < b.trace().events.size(); ++i) {
    std::uint32_t want = 0;
    for (std::size_t k = 1; k < starts.size(); ++k) want += i >= starts[k];
    ASSERT_EQ(b.trace().events[i].iteration, want) << i;
  }
}

TEST(IterationFinder, SeededBlocksOnlyCountTowardsLiveCounts) {
  TraceBuilder b;
  for (int w = 0; w < 4; ++w) b.alloc(1000 + static_cast<std::uint64_t>(w));
  std::vector<std::size_t> starts;
  for (int step = 0; step < 3; ++step) starts.push_back(training_step(&b, 3, false));
  // The recorded part starts with a step: the first is iteration 0, with the seeded weights.
  const IterationSplit split = find_iterations(b.trace(), 4);
  EXPECT_EQ(split.period, 12u);
  EXPECT_EQ(split.starts, std::vector<std::size_t>(starts.begin() + 1, starts.end()));
}

TEST(IterationFinder, OneStepIsOneIteration) {
  TraceBuilder b;
  for (int w = 0; w < 4; ++w) b.alloc(1000 + static_cast<std::uint64_t>(w));
  training_step(&b, 8, true);
  const IterationSplit split = find_iterations(b.trace());
  EXPECT_EQ(split.period, 0u);
  EXPECT_TRUE(split.starts.empty());
  EXPECT_TRUE(find_iterations(Trace{}).starts.empty());
}

// Inference frees each layer's input once the next is computed, so its layers repeat with
// their live counts; the head after the last layer is what tells one pass from many.
TEST(IterationFinder, RepeatedLayersOfOnePassAreNotIterations) {
  TraceBuilder b;
  for (int w = 0; w < 4; ++w) b.alloc(1000 + static_cast<std::uint64_t>(w));
  std::uint64_t hidden = b.alloc(100);
  for (int l = 0; l < 24; ++l) {
    std::uint64_t tmp = b.alloc(400);
    std::uint64_t next = b.alloc(100);
    b.free(tmp);
    b.free(hidden);
    hidden = next;
  }
  // Without the head, 24 layers cannot be told from 24 passes of a one-layer model.
  EXPECT_EQ(find_iterations(b.trace()).period, 2u);
  b.alloc(9999);  // logits
  const IterationSplit split = find_iterations(b.trace());
  EXPECT_EQ(split.period, 0u);
  EXPECT_TRUE(split.starts.empty());
}

// A loop at the end of one step that reaches the peak live count (an optimizer's per-parameter
// loop, an automaton's update steps) is not the run repeating unless it is most of the run.
TEST(IterationFinder, ALoopInsideOneStepIsNotTheRun) {
  TraceBuilder b;
  std::vector<std::uint64_t> kept;
  for (int i = 0; i < 40; ++i) kept.push_back(b.alloc(1000 + static_cast<std::uint64_t>(i)));
  for (int i = 0; i < 10; ++i) b.free(b.alloc(7));  // 10 allocations at the highest live count
  EXPECT_EQ(find_iterations(b.trace()).period, 0u);
  for (int i = 0; i < 40; ++i) b.free(b.alloc(7));  // now 50 of 90
  EXPECT_EQ(find_iterations(b.trace()).period, 1u);
}

// Real traces with their iterations recorded (tests/data/real: libtorch training captured with
// stalloc-capture): the finder, given the events without iterations, puts every boundary where
// the recorder did. Variable sequence lengths change the sizes every step: no repetition.
TEST(IterationFinder, AgreesWithRecordedIterations) {
  struct Case {
    const char* file;
    std::uint64_t period;
  };
  for (const Case& c : {Case{"fixed_seq128", 1226}, Case{"recompute_seq128", 1418}, Case{"varlen_seq64-192", 0}}) {
    SCOPED_TRACE(c.file);
    Trace t = read_trace(std::string(STALLOC_SOURCE_DIR) + "/tests/data/real/" + c.file + ".trace");
    std::vector<std::size_t> recorded;
    for (std::size_t i = 1; i < t.events.size(); ++i) {
      if (t.events[i].iteration != t.events[i - 1].iteration) recorded.push_back(i);
    }
    ASSERT_FALSE(recorded.empty());
    const Trace original = t;
    for (Event& e : t.events) e.iteration = 0;
    const IterationSplit split = find_iterations(t);
    EXPECT_EQ(split.period, c.period);
    if (c.period == 0) continue;
    EXPECT_EQ(split.starts, recorded);
    assign_iterations(&t, split.starts);
    EXPECT_EQ(t, original);
  }
}

TEST(IterationFinder, MedianIterationTime) {
  TraceBuilder b;
  std::int64_t ns = 0;
  EXPECT_FALSE(median_iteration_ns(b.trace(), &ns));
  alloc_at(b, 1, 100);
  EXPECT_FALSE(median_iteration_ns(b.trace(), &ns));  // one time stamp spans nothing
  b.alloc(2);                                       // no time stamp
  alloc_at(b, 3, 350);
  ASSERT_TRUE(median_iteration_ns(b.trace(), &ns));
  EXPECT_EQ(ns, 250);  // one iteration: the span
  // Iterations starting at 100, 350, 1350 and 1500 (the last one's end is unknown): the
  // durations 250, 1000 and 150 have the median 250.
  alloc_at(b, 4, 1350);
  alloc_at(b, 5, 1500);
  alloc_at(b, 6, 9000);
  assign_iterations(&b.trace(), {2, 3, 4});
  ASSERT_TRUE(median_iteration_ns(b.trace(), &ns));
  EXPECT_EQ(ns, 250);
  // An even count averages the two middle ones: 250, 1000 -> 625.
  assign_iterations(&b.trace(), {2, 3});
  ASSERT_TRUE(median_iteration_ns(b.trace(), &ns));
  EXPECT_EQ(ns, 625);
}

}  // namespace
}  // namespace stalloc
