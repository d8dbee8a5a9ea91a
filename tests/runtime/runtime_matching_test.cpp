#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <unordered_map>

#include "src/trace_replayer.h"
#include "vmm/fault_injecting_driver.h"
#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

// Iteration 3 has one request the plan lacks (an extra tensor) and lacks one it has (a
// temporary): the extra is served dynamically, matching looks ahead past the missing one, and
// every other request still gets its slot.
TEST(RuntimeMatching, ResynchronisesAfterAnExtraAndAMissingRequest) {
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  for (int i = 0; i < 6; ++i) {
    if (i == 3) {
      std::uint64_t a0 = b.alloc(2 * kG + 4096);
      std::uint64_t extra = b.alloc(12345);
      b.free(extra);
      b.free(b.alloc(kG / 2 + 64));
      std::uint64_t a1 = b.alloc(2 * kG + 4096 + 512);
      // The temporary after a1 is missing.
      std::uint64_t g1 = b.alloc(kG + 1000, 0, 1);
      b.free(a1);
      b.free(g1);
      std::uint64_t g0 = b.alloc(kG + 1000, 0, 1);
      b.free(a0);
      b.free(g0);
      std::uint64_t s1 = b.alloc(256);
      std::uint64_t s2 = b.alloc(4);
      b.free(s1);
      b.free(s2);
    } else {
      add_training_iteration(b, 2 * kG + 4096, 2);
    }
    b.next_iteration();
  }
  auto driver = host_driver();
  // Alias: an offset plan packs the bytes of neighbouring slots closer, so after the odd
  // iteration three of the next iteration's eight requests find bytes still held and are served
  // dynamically (conflicts); the matcher's resynchronisation is what this test is about.
  Runtime rt(test_config("profile_iterations:1,mode:alias"), *driver);
  ReplayOptions options;
  options.verify = true;
  ReplayResult r = replay_trace(rt, b.trace(), options);
  EXPECT_EQ(r.verify_errors, 0u);
  ASSERT_EQ(r.iterations.size(), 6u);
  const std::uint64_t per_iteration = allocations_per_iteration(2);
  EXPECT_EQ(r.iterations[2].matches, per_iteration);
  EXPECT_EQ(r.iterations[3].misses, 1u);
  EXPECT_EQ(r.iterations[3].matches, per_iteration - 1);
  EXPECT_EQ(r.iterations[4].matches, per_iteration);
  EXPECT_EQ(r.iterations[4].misses, 0u);
  EXPECT_EQ(r.iterations[5].matches, per_iteration);
}

// Iteration 3 changes the sizes of a run of 20 requests the plan saw fixed (MoE routing moves
// tokens between experts), longer than the matcher's lookahead: the run is served dynamically
// and every request after it still gets its slot. A cursor left on the first changed slot
// would look ahead only among the changed ones and miss all 30 after them.
TEST(RuntimeMatching, ARunOfChangedSizesDoesNotDerailThePlan) {
  constexpr int kRequests = 60;
  constexpr int kChangedFrom = 10;
  constexpr int kChanged = 20;
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  for (int it = 0; it < 5; ++it) {
    std::vector<std::uint64_t> ids;
    for (int i = 0; i < kRequests; ++i) {
      const bool changed = it == 3 && i >= kChangedFrom && i < kChangedFrom + kChanged;
      ids.push_back(b.alloc(kG / 8 + 4096 * static_cast<std::uint64_t>(i) + (changed ? 1024 : 0)));
    }
    for (std::uint64_t id : ids) b.free(id);
    b.next_iteration();
  }
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  ReplayResult r = replay_verified(rt, b.trace());
  ASSERT_EQ(r.iterations.size(), 5u);
  EXPECT_EQ(r.iterations[2].matches, static_cast<std::uint64_t>(kRequests));
  EXPECT_EQ(r.iterations[3].misses, static_cast<std::uint64_t>(kChanged));
  // Each of the others takes its slot; some find its bytes lent to the larger tensors of the
  // run (served beside the plan, on its idle chunks) and are served dynamically: conflicts.
  EXPECT_EQ(r.iterations[3].matches + r.iterations[3].conflicts,
            static_cast<std::uint64_t>(kRequests - kChanged));
}

// Ten tensors each iteration, each freed once the next is made, so that they take two sets of
// chunks by turns; iteration 0 also holds a large temporary (the profiled iterations held more
// than the plan will), and iteration 3 makes two tensors the plan lacks, one after the first
// planned tensor and one after the fifth, both freed at its end.
Trace extra_tensors_below_the_high_water() {
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  for (int it = 0; it < 5; ++it) {
    const std::uint64_t temporary = it == 0 ? b.alloc(16 * kG) : 0;
    std::vector<std::uint64_t> extra;
    std::uint64_t previous = 0;
    for (int i = 0; i < 10; ++i) {
      const std::uint64_t id = b.alloc(2 * kG + 4096 * static_cast<std::uint64_t>(i + 1));
      if (i > 0) b.free(previous);
      if (it == 3 && (i == 0 || i == 4)) extra.push_back(b.alloc(2 * kG + 100));
      previous = id;
    }
    b.free(previous);
    for (std::uint64_t id : extra) b.free(id);
    if (it == 0) b.free(temporary);
    b.next_iteration();
  }
  return b.trace();
}

// A tensor the plan lacks that makes a chunk while the runtime holds less than it once did
// costs no memory that counts: the rest of the iteration still lends only the pool chunks the
// plan is done with, and every later slot finds its chunks free. (Lending any idle chunk from
// then on, the second extra tensor took chunks the next slots needed: conflicts.)
TEST(RuntimeMatching, GrowthBelowTheMostEverHeldLendsNoChunkALaterSlotNeeds) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  const ReplayResult r = replay_verified(rt, extra_tensors_below_the_high_water());
  ASSERT_EQ(r.iterations.size(), 5u);
  EXPECT_EQ(r.iterations[2].matches, 10u);
  EXPECT_EQ(r.iterations[3].misses, 2u);
  EXPECT_EQ(r.iterations[3].matches, 10u);
  EXPECT_EQ(r.iterations[3].conflicts, 0u);
  EXPECT_EQ(r.iterations[4].matches, 10u);
}

// Two sequence lengths alternate, after a persistent weight.
Trace alternating_lengths_trace() {
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  for (int i = 0; i < 8; ++i) {
    add_training_iteration(b, i % 2 == 0 ? 2 * kG + 4096 : 3 * kG + 8192, 3);
    b.next_iteration();
  }
  return b.trace();
}

// Variable sequence length: two signatures alternate. With varying_sizes:off each is planned
// once it has been seen after profiling, and served from its own plan from its next
// occurrence on.
TEST(RuntimeMatching, PlanCacheServesAlternatingSignatures) {
  const Trace trace = alternating_lengths_trace();
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,varying_sizes:off"), *driver);
  ReplayOptions options;
  options.verify = true;
  ReplayResult r = replay_trace(rt, trace, options);
  EXPECT_EQ(r.verify_errors, 0u);
  EXPECT_EQ(rt.stats().plans_installed, 2u);
  ASSERT_EQ(r.iterations.size(), 8u);
  // Iteration 1 (B) is planned at its end, iteration 2 (A) at its end. In iteration 2 only
  // the requests whose sizes A and B share can match B's plan.
  EXPECT_EQ(r.iterations[2].misses, 3u);
  for (std::size_t i = 3; i < 8; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    EXPECT_EQ(r.iterations[i].matches, allocations_per_iteration(3));
    EXPECT_EQ(r.iterations[i].misses, 0u);
    EXPECT_EQ(r.iterations[i].vmm_calls, 0u);
  }
}

// The next iteration is predicted to be the most frequent successor of the last one, not the
// latest: iterations of signature B (an extra tensor at the end, past the look-ahead that could
// switch plans) are interrupted once by A; the B after that A is followed by B again, and
// predicting A there (what followed B last time) would miss the extra tensor.
TEST(RuntimeMatching, AOneOffIterationDoesNotRedirectThePrediction) {
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  for (int i = 0; i < 9; ++i) {
    add_training_iteration(b, 2 * kG + 4096, 8);
    if (i != 4) b.free(b.alloc(5 * kG + 512));  // B's extra tensor; iteration 4 is an A
    b.next_iteration();
  }
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,varying_sizes:off"), *driver);
  const ReplayResult r = replay_verified(rt, b.trace());
  ASSERT_EQ(r.iterations.size(), 9u);
  ASSERT_GT(allocations_per_iteration(8), 16u);  // the extra tensor is past the look-ahead
  EXPECT_EQ(r.iterations[4].plans_installed, 1u);  // A's own plan
  for (std::size_t i = 6; i < 9; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    EXPECT_EQ(r.iterations[i].misses, 0u);
    EXPECT_EQ(r.iterations[i].matches, allocations_per_iteration(8) + 1);
  }
}

// The same alternation with varying_sizes:largest: one plan, at the larger sequence's sizes,
// serves both from iteration 3 on; the shorter one's tensors fit in its slots.
TEST(RuntimeMatching, OnePlanAtTheLargestSizesServesBothSequenceLengths) {
  const Trace trace = alternating_lengths_trace();
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,varying_sizes:largest"), *driver);
  const ReplayResult r = replay_verified(rt, trace);
  for (std::size_t i = 3; i < 8; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    EXPECT_EQ(r.iterations[i].matches, allocations_per_iteration(3));
    EXPECT_EQ(r.iterations[i].misses, 0u);
    EXPECT_EQ(r.iterations[i].vmm_calls, 0u);
    EXPECT_EQ(r.iterations[i].plans_installed, 0u);
  }
}

// The plan is made from long iterations; a shorter one follows, which it does not fit
// (varying_sizes:off). Its misses are packed on the pool's idle chunks: under a capacity that
// holds the pool and a few chunks more, but not the short iteration beside the pool, nothing
// fails.
TEST(RuntimeMatching, IterationThePlanDoesNotFitIsServedOnIdlePoolChunks) {
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  const std::uint64_t long_act = 6 * kG + 8192;
  const std::uint64_t short_act = 4 * kG + 4096;
  for (int i = 0; i < 5; ++i) {
    add_training_iteration(b, i < 3 ? long_act : short_act, 6);
    b.next_iteration();
  }
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,varying_sizes:off,capacity:" +
                         std::to_string(48 * kG)),
             *driver);
  ReplayOptions options;
  options.verify = true;
  ReplayResult r = replay_trace(rt, b.trace(), options);
  EXPECT_EQ(r.verify_errors, 0u);
  EXPECT_EQ(r.failed_allocations, 0u) << rt.stats().last_oom.reason;
  ASSERT_EQ(r.iterations.size(), 5u);
  EXPECT_EQ(r.iterations[2].misses, 0u);
  EXPECT_EQ(r.iterations[3].misses, 6u);  // every activation
  // The pool alone is most of the capacity: the short iteration could not have fit beside it.
  EXPECT_GE(rt.stats().pool_bytes, 36 * kG);
}

// Every iteration has a sequence length of its own (the activations' sizes), as with variable
// sequence lengths; iteration `extra_at` (if any) makes one request more.
Trace varying_lengths_trace(int iterations, int extra_at = -1) {
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  for (int i = 0; i < iterations; ++i) {
    if (i == extra_at) b.free(b.alloc(12345));
    const std::uint64_t act = 2 * kG + static_cast<std::uint64_t>((i * 7) % 10) * (kG / 4) + 4096;
    add_training_iteration(b, act, 3);
    b.next_iteration();
  }
  return b.trace();
}

// Every iteration from `first` on takes its slots for all of its `per_iteration` requests: no
// miss, no conflict, no plan installed (and, with no_vmm_calls, no VMM call).
void expect_served_by_one_plan(const ReplayResult& r, std::size_t first,
                               std::uint64_t per_iteration, bool no_vmm_calls) {
  ASSERT_LT(first, r.iterations.size());
  for (std::size_t i = first; i < r.iterations.size(); ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    EXPECT_EQ(r.iterations[i].matches, per_iteration);
    EXPECT_EQ(r.iterations[i].misses, 0u);
    EXPECT_EQ(r.iterations[i].conflicts, 0u);
    EXPECT_EQ(r.iterations[i].plans_installed, 0u);
    if (no_vmm_calls) {
      EXPECT_EQ(r.iterations[i].vmm_calls, 0u);
    }
  }
}

// With the default varying_sizes:dynamic, once the activations' ordinals have changed to sizes
// no neighbour had they become Dynamic slots of one plan, packed on the chunks the plan leaves
// idle: from then on no plan is made and every request is matched.
TEST(RuntimeMatching, DynamicSlotsServeEverySequenceLengthFromOnePlan) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  const ReplayResult r = replay_verified(rt, varying_lengths_trace(10));
  ASSERT_EQ(r.iterations.size(), 10u);
  // Iteration 0 also made the weight: one allocation more than iteration 1, whose sizes are
  // compared with it aligned past the weight. Its activations changed to new sizes, so the first
  // plan, made at its end, has Dynamic slots and serves every iteration after (in the first,
  // some slots find their bytes still held by pages of the profiled iterations: conflicts).
  EXPECT_EQ(r.iterations[2].misses, 0u);
  EXPECT_EQ(r.iterations[2].matches + r.iterations[2].conflicts, allocations_per_iteration(3));
  expect_served_by_one_plan(r, 3, allocations_per_iteration(3), false);
  EXPECT_EQ(rt.stats().plans_installed, 1u);
  // At the install the arenas gave back only the idle pages the pool took: the others serve the
  // tensors the plan leaves them, so an iteration no longer than those the arenas have served
  // creates no chunk (llama7b-varlen: all of them given back at the install, its next iteration
  // made 2,626 chunks again). The lengths of varying_lengths_trace: i * 7 % 10 quarters of a
  // granule above two.
  int longest = 0;
  int checked = 0;
  for (int i = 0; i < 10; ++i) {
    const int length = i * 7 % 10;
    if (i >= 2 && length <= longest) {
      EXPECT_EQ(r.iterations[static_cast<std::size_t>(i)].creates, 0u) << "iteration " << i;
      ++checked;
    }
    longest = std::max(longest, length);
  }
  EXPECT_GE(checked, 5);
}

// An iteration whose tensors all scale with the sequence length (activations, temporaries,
// gradients) but for the optimizer's two small ones.
void add_length_iteration(ThreadedTraceBuilder& b, std::uint64_t length, int layers) {
  std::vector<std::uint64_t> acts;
  for (int l = 0; l < layers; ++l) {
    acts.push_back(b.alloc(length * 3000 + static_cast<std::uint64_t>(l) * 512));
    b.free(b.alloc(length * 700 + 64));
  }
  for (int l = layers - 1; l >= 0; --l) {
    const std::uint64_t grad = b.alloc(length * 1100 + 1000, 0, 1);
    b.free(acts[static_cast<std::size_t>(l)]);
    b.free(grad);
  }
  b.free(b.alloc(256));
  b.free(b.alloc(4));
}

// As a Megatron run with variable sequence lengths: the warm-up makes the weights and six
// temporaries before its first forward pass, and iteration 1 makes a buffer that it keeps (the
// sequence-parallel gather buffer, made again only at a longer length).
Trace megatron_like_lengths_trace(int layers) {
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  std::vector<std::uint64_t> temporaries;
  for (int t = 0; t < 6; ++t) temporaries.push_back(b.alloc(7777 + static_cast<std::uint64_t>(t)));
  for (std::uint64_t t : temporaries) b.free(t);
  const std::uint64_t lengths[] = {1428, 5738, 2120, 3482, 4858, 3730, 1012, 4872};
  for (int i = 0; i < 8; ++i) {
    if (i == 1) b.alloc(lengths[1] * 2048);
    add_length_iteration(b, lengths[i], layers);
    b.next_iteration();
  }
  return b.trace();
}

// The first plan is made from iteration 1 with the lengths' sizes Dynamic already (compared
// with the warm-up's own tensors), without the buffer (no free of the iteration before stands
// for it), and every iteration after follows it: one plan, no miss.
TEST(RuntimeMatching, TheFirstPlanOfVariableLengthsIsFollowedFromIterationTwo) {
  const int layers = 16;
  const std::uint64_t per_iteration = 3 * layers + 2;
  ASSERT_LE(6u, (per_iteration + 1) / 8);  // the warm-up's extra tensors are compared
  const std::string log = ::testing::TempDir() + "/first_plan_of_lengths.log";
  std::remove(log.c_str());
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,log:" + log), *driver);
  const ReplayResult r = replay_verified(rt, megatron_like_lengths_trace(layers));
  ASSERT_EQ(r.iterations.size(), 8u);
  EXPECT_EQ(r.iterations[1].plans_installed, 1u);
  for (std::size_t i = 2; i < r.iterations.size(); ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    EXPECT_EQ(r.iterations[i].misses, 0u);
    EXPECT_EQ(r.iterations[i].matches + r.iterations[i].conflicts, per_iteration);
    EXPECT_EQ(r.iterations[i].plans_installed, 0u);
  }
  EXPECT_EQ(rt.stats().plans_installed, 1u);
  std::ifstream in(log);
  const std::string logged((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(logged.find("plan installed: " + std::to_string(per_iteration) + " slots"),
            std::string::npos)
      << "the buffer is left out\n" << logged;
}

// MoE routing: each layer's expert buffers trade sizes every iteration (neighbours swap: no
// size is new to its place). The first comparison finds many sizes changed, none yet
// twice: a plan of fixed slots would be left at once, so it is not installed (plans_deferred);
// the next comparison makes the routed buffers Dynamic slots, and that plan serves every
// iteration after with no miss.
TEST(RuntimeMatching, APlanOfFixedSlotsWhoseSizesJustChangedIsNotInstalled) {
  constexpr int kLayers = 6;
  constexpr int kExperts = 8;
  ThreadedTraceBuilder b;
  for (int it = 0; it < 8; ++it) {
    for (int l = 0; l < kLayers; ++l) {
      std::vector<std::uint64_t> ids;
      ids.push_back(b.alloc(kG / 2 + 4096 * static_cast<std::uint64_t>(l)));
      for (int e = 0; e < kExperts; ++e) {
        const auto share = static_cast<std::uint64_t>((it % 2 == 0 ? e : e ^ 1) + 1);
        ids.push_back(b.alloc(share * (kG / 8)));
      }
      for (std::uint64_t id : ids) b.free(id);
    }
    b.next_iteration();
  }
  const std::string log = ::testing::TempDir() + "/deferred_plan.log";
  std::remove(log.c_str());
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,log:" + log), *driver);
  const ReplayResult r = replay_verified(rt, b.trace());
  ASSERT_EQ(r.iterations.size(), 8u);
  EXPECT_EQ(rt.stats().plans_deferred, 1u);
  EXPECT_EQ(rt.stats().plan_installs, 1u);
  // Iteration 2 goes on online rather than leave a plan after its first slots.
  EXPECT_EQ(r.iterations[2].misses + r.iterations[2].conflicts, 0u);
  EXPECT_EQ(r.iterations[2].plans_installed, 1u);
  expect_served_by_one_plan(r, 3, kLayers * (kExperts + 1), false);
  std::ifstream in(log);
  const std::string logged((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(logged.find("plan of iteration 1 not installed: its sizes changed"), std::string::npos)
      << logged;
}

// After the Dynamic plan, one iteration makes an extra request and gets an exact plan of its
// own, which the next iteration is predicted to follow; the first request that does not fit it
// switches to the plan whose Dynamic slot there takes any size. The extra request and the
// switch leave packed pages on chunks the Dynamic plan wants: its slots conflict with them for
// an iteration or two, and the chunks they found taken go back to the pool once emptied
// instead of staying parked, so the iterations after are matched in full.
TEST(RuntimeMatching, SwitchesToThePlanWhoseDynamicSlotFits) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  const ReplayResult r = replay_verified(rt, varying_lengths_trace(13, 7));
  ASSERT_EQ(r.iterations.size(), 13u);
  EXPECT_EQ(r.iterations[7].misses, 1u);
  EXPECT_EQ(r.iterations[7].plans_installed, 1u);  // its own, at its end
  for (std::size_t i = 8; i < r.iterations.size(); ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    EXPECT_EQ(r.iterations[i].misses, 0u);
    EXPECT_EQ(r.iterations[i].matches + r.iterations[i].conflicts, allocations_per_iteration(3));
    if (i >= 10) {
      EXPECT_EQ(r.iterations[i].matches, allocations_per_iteration(3));
    }
  }
}

// An iteration that follows its plan but for one request in a hundred (here an extra tensor)
// counts as the plan's: no plan is made for it, and the iterations after it are served by the
// same plan with no install and no VMM call. (SwitchesToThePlanWhoseDynamicSlotFits shows the
// other side: on a plan of 11 slots one extra request is too many, and it gets a plan.)
TEST(RuntimeMatching, AnIterationAlmostOnItsPlanIsNotPlannedAgain) {
  const int layers = 40;
  ASSERT_GE(allocations_per_iteration(layers), 100u);
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  for (int i = 0; i < 7; ++i) {
    if (i == 4) b.free(b.alloc(12345));
    add_training_iteration(b, 2 * kG + 4096, layers);
    b.next_iteration();
  }
  const std::string log = ::testing::TempDir() + "/near_plan.log";
  std::remove(log.c_str());
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,log:" + log), *driver);
  const ReplayResult r = replay_verified(rt, b.trace());
  ASSERT_EQ(r.iterations.size(), 7u);
  EXPECT_EQ(r.iterations[4].misses, 1u);
  std::ifstream in(log);
  const std::string logged((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(logged.find("iteration 4 followed its plan of " +
                        std::to_string(allocations_per_iteration(layers)) +
                        " slots, 1 request or slot off it (12.06 KiB): not planned"),
            std::string::npos)
      << logged;
  EXPECT_EQ(r.iterations[4].matches, allocations_per_iteration(layers));
  for (std::size_t i = 4; i < 7; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    EXPECT_EQ(r.iterations[i].plans_installed, 0u);
    if (i > 4) {
      EXPECT_EQ(r.iterations[i].misses, 0u);
      EXPECT_EQ(r.iterations[i].matches, allocations_per_iteration(layers));
      EXPECT_EQ(r.iterations[i].vmm_calls, 0u);
    }
  }
  EXPECT_EQ(rt.stats().plan_installs, 1u);
}

// Packed sequences: each layer makes a tiny offsets tensor (16 or 24 bytes, by the number of
// documents) before its activation, and from iteration 2 on the two sizes trade places every
// other iteration. A tiny request that meets the other size at the cursor misses; it does not
// jump to the next slot of its size, over the activation's slot, which the activation would
// then miss: every tiny request misses, every activation takes its slot. And since what is off
// the plan is a few hundred bytes of a pool of megabytes, the iteration counts as the plan's:
// no second plan, no install, and no VMM call beyond a small page.
TEST(RuntimeMatching, TinyTensorsThatTradeSizesNeitherDerailNorReplanThePlan) {
  const int layers = 60;  // 120 slots: more off the plan than one in a hundred
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  for (int it = 0; it < 6; ++it) {
    std::vector<std::uint64_t> acts;
    for (int l = 0; l < layers; ++l) {
      const std::uint64_t offsets = b.alloc((l + std::max(it, 1)) % 2 == 0 ? 16 : 24);
      acts.push_back(b.alloc(2 * kG + 4096 + static_cast<std::uint64_t>(l) * 512));
      b.free(offsets);
    }
    for (std::uint64_t a : acts) b.free(a);
    b.next_iteration();
  }
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  const ReplayResult r = replay_verified(rt, b.trace());
  ASSERT_EQ(r.iterations.size(), 6u);
  const auto requests = 2u * static_cast<std::uint64_t>(layers);
  for (std::size_t i = 2; i < 6; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    const bool traded = i % 2 == 0;
    EXPECT_EQ(r.iterations[i].misses, traded ? requests / 2 : 0u);
    EXPECT_EQ(r.iterations[i].matches + r.iterations[i].conflicts,
              traded ? requests / 2 : requests);
    EXPECT_EQ(r.iterations[i].plans_installed, 0u);
    // The misses take a small page (given back after an iteration without misses).
    EXPECT_LE(r.iterations[i].vmm_calls, traded ? 16u : 0u);
  }
  EXPECT_EQ(rt.stats().plan_installs, 1u);
}

// varying_sizes:auto. Activations that all grow and shrink with the iteration's sequence length
// are planned at their largest: once the longest iteration (7) has been planned, every shorter
// one fits the slots, with no miss, no conflict, no install and no VMM call.
TEST(RuntimeMatching, AutoPlansSizesThatVaryTogetherAtTheirLargest) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,varying_sizes:auto"), *driver);
  const ReplayResult r = replay_verified(rt, varying_lengths_trace(13));
  ASSERT_EQ(r.iterations.size(), 13u);
  expect_served_by_one_plan(r, 9, allocations_per_iteration(3), true);
}

// varying_sizes:auto. Two routed buffers trade sizes (their sum is constant, as MoE experts'
// loads are): planned at their largest together they would hold more than any iteration, so
// they become Dynamic slots, and a buffer larger than any seen before is still matched. Planned
// at their largest (varying_sizes:largest) it is a miss.
TEST(RuntimeMatching, AutoKeepsSizesThatVaryApartDynamic) {
  ThreadedTraceBuilder b;
  for (int i = 0; i < 8; ++i) {
    const std::uint64_t first =
        i == 7 ? 4 * kG + kG / 2 + 100 : kG * static_cast<std::uint64_t>(1 + i % 3) + 100;
    const std::uint64_t second = 5 * kG + 200 - first;
    const std::uint64_t a = b.alloc(first);
    const std::uint64_t c = b.alloc(second);
    add_training_iteration(b, 2 * kG + 4096, 2);
    b.free(a);
    b.free(c);
    b.next_iteration();
  }
  auto last_iteration = [&](const std::string& policy) {
    auto driver = host_driver();
    Runtime rt(test_config("profile_iterations:1,varying_sizes:" + policy), *driver);
    return replay_verified(rt, b.trace()).iterations.back();
  };
  EXPECT_EQ(last_iteration("auto").misses, 0u);
  EXPECT_EQ(last_iteration("largest").misses, 1u);
}

TEST(RuntimeMatching, PlanCacheKeepsAtMostItsCapacity) {
  const Trace trace = alternating_lengths_trace();
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,plan_cache_size:1,varying_sizes:off"), *driver);
  replay_verified(rt, trace);
  EXPECT_EQ(rt.stats().plans_installed, 1u);
  EXPECT_GE(rt.stats().plan_installs, 2u);
}

// An evicted plan's views stay mapped until the GPU work on the streams that used them has
// completed (events held: not yet), then go at the next boundary.
TEST(RuntimeMatching, AnEvictedPlanIsUnmappedOnlyAfterItsStreamsWork) {
  auto host = host_driver();
  vmm::FaultInjectingDriver driver(*host);
  Runtime rt(test_config("profile_iterations:1,plan_cache_size:2,varying_sizes:off"), driver);
  ThreadedTraceBuilder b;
  b.alloc(3 * kG);
  for (int i = 0; i < 9; ++i) {  // three sequence lengths in turn: one plan too many
    add_training_iteration(b, 2 * kG + 4096 + static_cast<std::uint64_t>(i % 3) * (kG / 2), 3);
    b.next_iteration();
  }
  driver.hold_events(true);
  replay_verified(rt, b.trace());
  ASSERT_GE(rt.stats().plan_installs, 3u);
  EXPECT_EQ(rt.stats().plans_installed, 2u);
  EXPECT_GE(rt.stats().plans_retiring, 1u);
  const std::size_t held_mappings = driver.counters().live_mappings;
  driver.hold_events(false);
  rt.step();
  EXPECT_EQ(rt.stats().plans_retiring, 0u);
  EXPECT_LT(driver.counters().live_mappings, held_mappings);
}

// Phases of tensors that live together and die together, each phase with other sizes: later
// phases reuse the chunks of earlier ones in the same order, so slots share views.
Trace phased_trace(int iterations, int phases, int per_phase) {
  ThreadedTraceBuilder b;
  for (int it = 0; it < iterations; ++it) {
    for (int p = 0; p < phases; ++p) {
      std::vector<std::uint64_t> ids;
      for (int i = 0; i < per_phase; ++i) {
        const auto chunks = static_cast<std::uint64_t>((p * 7 + i) % 5 + 1);
        ids.push_back(b.alloc(chunks * kG + 4096 * static_cast<std::uint64_t>(p + 1)));
      }
      for (std::uint64_t id : ids) b.free(id);
    }
    b.next_iteration();
  }
  return b.trace();
}

// Tensors of 1-5 chunks, each freed `lag` allocations after it was made: the chunks a tensor
// finds free, and so its chunk sequence, differ from one to the next, and alias mode maps a
// view for nearly every tensor, where windowed mode maps only those of the current window.
Trace staggered_trace(int iterations, int per_iteration, int lag) {
  ThreadedTraceBuilder b;
  for (int it = 0; it < iterations; ++it) {
    std::vector<std::uint64_t> ids;
    for (int i = 0; i < per_iteration; ++i) {
      const auto chunks = static_cast<std::uint64_t>((i * 7) % 5 + 1);
      ids.push_back(b.alloc(chunks * kG + 4096 * static_cast<std::uint64_t>(i % 3 + 1)));
      if (i >= lag) b.free(ids[static_cast<std::size_t>(i - lag)]);
    }
    for (std::size_t i = ids.size() - static_cast<std::size_t>(lag); i < ids.size(); ++i) {
      b.free(ids[i]);
    }
    b.next_iteration();
  }
  return b.trace();
}

// An alias plan needing more live mappings than the driver allows is planned again as an offset
// plan, which maps each chunk once.
TEST(RuntimeMatching, AnAliasPlanOverTheMappingLimitFallsBackToOffset) {
  const int per_iteration = 96;
  const Trace trace = staggered_trace(6, per_iteration, 4);
  auto installed_mappings = [&](const char* mode) {
    auto driver = host_driver();
    Runtime rt(test_config(std::string("profile_iterations:1,windows:8,mode:") + mode), *driver);
    replay_trace(rt, trace, {});
    EXPECT_EQ(rt.stats().plan_failures, 0u) << mode;
    EXPECT_EQ(rt.stats().plan_installs, 1u) << mode;
    return driver->counters().live_mappings;
  };
  const std::uint64_t alias = installed_mappings("alias");
  const std::uint64_t offset = installed_mappings("offset");
  ASSERT_LT(offset, alias);  // the premise: an offset plan maps each chunk once
  // Room for the offset plan but not the alias plan: alias is refused before anything is mapped,
  // offset is installed, and the steady iterations make no VMM call.
  {
    auto driver = host_driver(0, alias - 1);
    Runtime rt(test_config("profile_iterations:1,windows:8,mode:alias"), *driver);
    const ReplayResult r = replay_verified(rt, trace);
    const RuntimeStats s = rt.stats();
    EXPECT_EQ(s.plan_failures, 1u);
    EXPECT_NE(s.last_plan_error.find("live mappings limit"), std::string::npos) << s.last_plan_error;
    EXPECT_EQ(s.plan_installs, 1u);
    EXPECT_EQ(r.failed_allocations, 0u);
    EXPECT_LE(driver->counters().peak_live_mappings, alias - 1);
    EXPECT_EQ(r.iterations[5].matches, static_cast<std::uint64_t>(per_iteration));
    EXPECT_EQ(r.iterations[5].vmm_calls, 0u);
  }
}

// A program that changes its iteration (another phase, another model): `first`'s iterations,
// then four of `live` tensors of three pages and a bit, all live at once (sizes `first` never
// asked for); with `hold_first`, each of those iterations also starts with `first`'s first
// request and frees it last, so that the first plan's slot for it is taken and that plan is not
// idle while the new shape is profiled.
Trace then_another_shape(const Trace& first, std::uint64_t live, bool hold_first) {
  ThreadedTraceBuilder b;
  std::unordered_map<std::uint64_t, std::uint64_t> id_of;
  for (const Event& e : first.events) {
    if (e.kind == EventKind::Alloc) {
      id_of[e.id] = b.alloc(e.size, e.stream, e.thread);
    } else {
      b.free(id_of.at(e.id));
    }
    if (&e != &first.events.back() && (&e + 1)->iteration != e.iteration) b.next_iteration();
  }
  b.next_iteration();
  for (int it = 0; it < 4; ++it) {
    std::vector<std::uint64_t> ids;
    if (hold_first) ids.push_back(b.alloc(first.events.front().size));
    for (std::uint64_t i = 0; i < live; ++i) ids.push_back(b.alloc(3 * kG + 100 + 64 * i));
    for (std::uint64_t id : ids) b.free(id);
    b.next_iteration();
  }
  return b.trace();
}

// Live mappings are a budget, not a wall: an installed plan's views give way when tensors
// served beside it need the mappings, rather than an allocation fail while memory is free.
// Idle, the first plan is retired (the new shape's plan then installs in its place); holding a
// tensor, it unmaps the views no tensor uses (InstalledPlan::shed_idle_views).
void expect_the_new_shape_is_served(bool hold_first) {
  const int per_iteration = 96;
  const Trace first = staggered_trace(4, per_iteration, 4);
  std::uint64_t plan_mappings = 0;
  {
    auto driver = host_driver();
    Runtime rt(test_config("profile_iterations:1,mode:alias"), *driver);
    replay_verified(rt, first);
    ASSERT_EQ(rt.stats().plan_installs, 1u);
    plan_mappings = driver->counters().live_mappings;
  }
  ASSERT_GT(plan_mappings, 100u);
  // More pages than the first plan's mappings, and together with them more than the driver
  // allows.
  const std::uint64_t limit = 2 * plan_mappings;
  const std::uint64_t live = plan_mappings / 3 + 8;
  ASSERT_GT(plan_mappings + 3 * live, limit);
  auto driver = host_driver(0, limit);
  Runtime rt(test_config("profile_iterations:1,mode:alias"), *driver);
  const ReplayResult r = replay_verified(rt, then_another_shape(first, live, hold_first));
  EXPECT_EQ(r.failed_allocations, 0u);
  EXPECT_EQ(rt.stats().ooms, 0u);
  EXPECT_LE(driver->counters().peak_live_mappings, limit);
  EXPECT_EQ(r.iterations[3].matches, static_cast<std::uint64_t>(per_iteration));
  EXPECT_GE(rt.stats().plan_installs, 2u);  // the second shape is planned too
  EXPECT_EQ(r.iterations[7].misses, 0u);
}

TEST(RuntimeMatching, AnIdlePlanIsRetiredRatherThanAnAllocationFail) {
  expect_the_new_shape_is_served(false);
}

TEST(RuntimeMatching, AFollowedPlanShedsViewsNoTensorUsesRatherThanAnAllocationFail) {
  expect_the_new_shape_is_served(true);
}

// Slots whose chunk sequences repeat share views: the installed plan holds fewer mappings than
// its slots have chunks, and every request still gets bytes no other live tensor has (verified
// patterns).
TEST(RuntimeMatching, AliasViewsAreSharedBetweenSlotsWithTheSameChunks) {
  const Trace trace = phased_trace(4, 16, 6);
  PlanOptions plan_options;
  plan_options.granularity = kG;
  ChunkPlan plan = plan_iteration(trace, 1, plan_options);
  const std::uint64_t per_slot_mappings = plan.mappings;
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:100"), *driver);
  rt.add_plan(std::move(plan));
  const std::uint64_t installed_mappings = driver->counters().live_mappings;
  EXPECT_GT(installed_mappings, 0u);
  EXPECT_LT(installed_mappings, per_slot_mappings);
  const ReplayResult r = replay_verified(rt, trace);
  for (std::uint32_t it = 1; it < 4; ++it) {
    EXPECT_EQ(r.iterations[it].matches, 16u * 6u) << it;
    EXPECT_EQ(r.iterations[it].vmm_calls, 0u) << it;
  }
}

// Three 2-chunk tensors per iteration: X and Y live together, Z after both; the plan gives X
// chunks 0-1, Y 2-3 and Z `z_chunks`.
struct ThreeSlotPlan {
  ThreadedTraceBuilder b;
  ChunkPlan plan;
  explicit ThreeSlotPlan(std::vector<std::uint32_t> z_chunks) {
    for (int it = 0; it < 4; ++it) {
      const std::uint64_t x = b.alloc(2 * kG);
      const std::uint64_t y = b.alloc(2 * kG);
      b.free(x);
      b.free(y);
      b.free(b.alloc(2 * kG));
      b.next_iteration();
    }
    plan.granularity = kG;
    plan.num_chunks = 4;
    plan.signature = signature_of(b.trace(), 1);
    plan.iteration = 1;
    const std::tuple<std::uint64_t, std::uint64_t, std::vector<std::uint32_t>> slots[] = {
        {0, 2, {0, 1}}, {1, 3, {2, 3}}, {4, 6, std::move(z_chunks)}};
    for (std::size_t i = 0; i < 3; ++i) {
      PlannedSlot s;
      s.ordinal = i;
      s.size = 2 * kG;
      s.start = std::get<0>(slots[i]);
      s.end = std::get<1>(slots[i]);
      s.chunks = std::get<2>(slots[i]);
      plan.slots.push_back(s);
    }
  }
};

void expect_installed_and_followed(const ThreeSlotPlan& three, std::uint64_t mappings,
                                   std::uint64_t access_calls) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:100"), *driver);
  rt.add_plan(three.plan);
  EXPECT_EQ(driver->counters().live_mappings, mappings);
  // The views of a mapping stage lie back to back in one reservation: access is set once per
  // stage that holds views, not once per view.
  EXPECT_EQ(driver->counters().set_accesses, access_calls);
  const ReplayResult r = replay_verified(rt, three.b.trace());
  for (std::uint32_t it = 1; it < 4; ++it) {
    EXPECT_EQ(r.iterations[it].matches, 3u) << it;
    EXPECT_EQ(r.iterations[it].vmm_calls, 0u) << it;
  }
}

// A slot whose chunks are one ascending run is seen through the pool's own view (each chunk
// mapped once), even where no other slot's view holds that run: here Z takes the second chunk
// of X and the first of Y. Without the pool view, Z needs a view of its own (6 mappings).
TEST(RuntimeMatching, SlotsWhoseChunksAreOneRunShareThePoolsView) {
  expect_installed_and_followed(ThreeSlotPlan({1, 2}), 4, 1);
}

// Chunks in another order need a view of their own: then fewer chunks lie in runs than the
// pool holds, and each slot has its own view (6 mappings), each in the mapping stage of its
// slot (0, 1 and 2 of 3 slots: stages 0, 5 and 10), one access call each.
TEST(RuntimeMatching, AViewOfItsOwnForEachSlotAndOneAccessCallPerStage) {
  expect_installed_and_followed(ThreeSlotPlan({2, 1}), 6, 3);
}

// MoE-like: one tensor grows every iteration. With varying_sizes:dynamic the plan, made from
// two iterations, makes it a Dynamic slot matched by position; with off, it is a miss.
TEST(RuntimeMatching, VaryingSizesBecomeDynamicSlots) {
  ThreadedTraceBuilder b;
  for (int i = 0; i < 7; ++i) {
    std::uint64_t routed = b.alloc(kG * static_cast<std::uint64_t>(1 + i) + 100);
    add_training_iteration(b, 2 * kG + 4096, 2);
    b.free(routed);
    b.next_iteration();
  }
  auto run = [&](const std::string& conf) {
    auto driver = host_driver();
    Runtime rt(test_config("profile_iterations:1," + conf), *driver);
    ReplayOptions options;
    options.verify = true;
    ReplayResult r = replay_trace(rt, b.trace(), options);
    EXPECT_EQ(r.verify_errors, 0u);
    return r.iterations[6];
  };
  const IterationReport with = run("varying_sizes:dynamic");
  EXPECT_EQ(with.matches, allocations_per_iteration(2) + 1);
  EXPECT_EQ(with.misses, 0u);
  const IterationReport without = run("varying_sizes:off");
  EXPECT_EQ(without.misses, 1u);
}

// A Dynamic slot's tensor takes the first bytes of the view mapped on its budget at install,
// whatever its size: once the plan with the Dynamic slot is followed, a routed tensor of a size
// never seen before (made and freed before the activations, whose chunks are its budget) is
// matched, lives in no packed arena, keeps its data, and costs no VMM call.
TEST(RuntimeMatching, DynamicTensorsTakeTheViewOnTheirBudget) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  const vmm::StreamHandle stream = 0;
  const std::size_t act_size = 2 * kG + 4096;
  for (int i = 0; i < 9; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    const RuntimeStats before = rt.stats();
    // A size no earlier iteration had, below twice the first: within every budget.
    const std::size_t routed_size = kG + static_cast<std::size_t>(i) * (kG / 8) + 100;
    auto* routed = static_cast<unsigned char*>(rt.malloc(routed_size, 0, stream));
    ASSERT_NE(routed, nullptr);
    std::memset(routed, 0xA0 + i, routed_size);
    void* expert = rt.malloc(kG, 0, stream);
    ASSERT_NE(expert, nullptr);
    std::memset(expert, 0x33, kG);
    if (i >= 5) {
      EXPECT_EQ(rt.stats().packed_bytes, 0u);  // the routed tensor is in the plan's view
      EXPECT_EQ(rt.stats().matches - before.matches, 2u);
    }
    for (std::size_t k = 0; k < routed_size; k += 4093) {
      ASSERT_EQ(routed[k], static_cast<unsigned char>(0xA0 + i)) << "byte " << k;
    }
    rt.free(expert, kG, 0, stream);
    rt.free(routed, routed_size, 0, stream);
    void* act = rt.malloc(act_size, 0, stream);
    void* grad = rt.malloc(act_size, 0, stream);
    ASSERT_NE(act, nullptr);
    ASSERT_NE(grad, nullptr);
    std::memset(act, 0x11, act_size);
    std::memset(grad, 0x22, act_size);
    rt.free(grad, act_size, 0, stream);
    rt.free(act, act_size, 0, stream);
    rt.step();
    rt.wait_for_planning();
    if (i >= 6) {
      EXPECT_EQ(rt.stats().vmm_calls(), before.vmm_calls());
      EXPECT_EQ(rt.stats().conflicts, before.conflicts);
      EXPECT_EQ(rt.stats().misses, before.misses);
    }
  }
}

// A hand-made plan: Dynamic slot 0 lives over [0, 3), slot 1 inside it over [1, 2), both
// planned at `size` with the same budget, chunks 0 and 1.
ChunkPlan two_dynamic_slots_on_one_budget(std::uint64_t size) {
  ChunkPlan plan;
  plan.granularity = kG;
  plan.num_chunks = 2;
  plan.signature = {1, 2, 4};
  for (const auto& [ordinal, start, end] : {std::tuple{0, 0, 3}, std::tuple{1, 1, 2}}) {
    PlannedSlot s;
    s.ordinal = static_cast<std::uint64_t>(ordinal);
    s.size = size;
    s.start = static_cast<std::uint64_t>(start);
    s.end = static_cast<std::uint64_t>(end);
    s.kind = SlotKind::Dynamic;
    s.budget_chunks = {0, 1};
    plan.slots.push_back(s);
  }
  return plan;
}

// Two Dynamic slots live at once on the same budget chunks (the plan left too few idle): the
// first tensor takes the first bytes of the shared chunks, the second finds them taken, is a
// conflict and is packed elsewhere. Neither overwrites the other; once the first is freed, the
// next tensor of its slot gets the view again.
TEST(RuntimeMatching, DynamicTensorsWithOverlappingBudgetsNeverShareBytes) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:100"), *driver);
  rt.add_plan(two_dynamic_slots_on_one_budget(kG));
  const vmm::StreamHandle stream = 0;
  const std::size_t first_size = kG + kG / 2;
  const std::size_t second_size = kG / 2;
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    const RuntimeStats before = rt.stats();
    auto* first = static_cast<unsigned char*>(rt.malloc(first_size, 0, stream));
    auto* second = static_cast<unsigned char*>(rt.malloc(second_size, 0, stream));
    ASSERT_NE(first, nullptr);
    ASSERT_NE(second, nullptr);
    EXPECT_EQ(rt.stats().matches - before.matches, 1u);
    EXPECT_EQ(rt.stats().conflicts - before.conflicts, 1u);
    EXPECT_EQ(rt.stats().packed_bytes, second_size);
    std::memset(first, 0x5A, first_size);
    std::memset(second, 0xC3, second_size);
    for (std::size_t k = 0; k < first_size; k += 997) ASSERT_EQ(first[k], 0x5A) << k;
    for (std::size_t k = 0; k < second_size; k += 997) ASSERT_EQ(second[k], 0xC3) << k;
    rt.free(second, second_size, 0, stream);
    rt.free(first, first_size, 0, stream);
    rt.step();
  }
}

// When a tensor's first pages are held by another Dynamic slot's tensor on an overlapping
// budget, it starts at the first later page of its own view that is free: both are matched, in
// the plan's views, at different pages.
TEST(RuntimeMatching, ADynamicTensorStartsPastPagesAnotherHolds) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:100"), *driver);
  rt.add_plan(two_dynamic_slots_on_one_budget(kG / 2));
  const vmm::StreamHandle stream = 0;
  const std::size_t size = kG / 2;
  const auto calls = rt.stats().vmm_calls();
  auto* first = static_cast<unsigned char*>(rt.malloc(size, 0, stream));
  auto* second = static_cast<unsigned char*>(rt.malloc(size, 0, stream));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(rt.stats().matches, 2u);
  EXPECT_EQ(rt.stats().conflicts, 0u);
  EXPECT_EQ(rt.stats().packed_bytes, 0u);
  EXPECT_EQ(rt.stats().vmm_calls(), calls);
  std::memset(first, 0x5A, size);
  std::memset(second, 0xC3, size);
  for (std::size_t k = 0; k < size; k += 997) ASSERT_EQ(first[k], 0x5A) << k;
  rt.free(second, size, 0, stream);
  rt.free(first, size, 0, stream);
  EXPECT_EQ(rt.stats().allocated_bytes, 0u);
  EXPECT_EQ(rt.stats().invalid_frees, 0u);
}

// A Dynamic slot whose budget is the start of another slot's chunks shares that slot's view,
// but grows only over its own budget: a tensor longer than the budget is packed elsewhere
// rather than take the next chunk of the shared view, which the plan does not leave idle.
TEST(RuntimeMatching, ADynamicTensorGrowsOnlyOverItsOwnBudget) {
  ChunkPlan plan;
  plan.granularity = kG;
  plan.num_chunks = 2;
  plan.signature = {1, 2, 4};
  PlannedSlot whole;
  whole.ordinal = 0;
  whole.size = 2 * kG;
  whole.start = 0;
  whole.end = 1;
  whole.chunks = {0, 1};
  PlannedSlot routed;
  routed.ordinal = 1;
  routed.size = kG / 2;
  routed.start = 2;
  routed.end = 3;
  routed.kind = SlotKind::Dynamic;
  routed.budget_chunks = {0};
  plan.slots = {whole, routed};
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:100"), *driver);
  rt.add_plan(std::move(plan));
  const vmm::StreamHandle stream = 0;
  for (const std::size_t size : {kG / 2, kG + kG / 2}) {
    SCOPED_TRACE("routed size " + std::to_string(size));
    void* w = rt.malloc(2 * kG, 0, stream);
    ASSERT_NE(w, nullptr);
    rt.free(w, 2 * kG, 0, stream);
    auto* r = static_cast<unsigned char*>(rt.malloc(size, 0, stream));
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(rt.stats().packed_bytes, size > kG ? size : 0u);
    std::memset(r, 0x77, size);
    rt.free(r, size, 0, stream);
    rt.step();
  }
}

// Routed sizes that come and go within a range: with varying_sizes:largest the slot is planned
// at the largest size seen, and once every size has been seen, every iteration fits the plan
// with no miss, no re-planning and no VMM call; allocated bytes count what was asked for.
TEST(RuntimeMatching, VaryingSizesFitInSlotsPlannedAtTheLargest) {
  ThreadedTraceBuilder b;
  const std::uint64_t routed_sizes[] = {2 * kG + 100, 5 * kG + 300, kG + 7, 3 * kG};
  for (int i = 0; i < 10; ++i) {
    std::uint64_t routed = b.alloc(routed_sizes[i % 4]);
    add_training_iteration(b, 2 * kG + 4096, 2);
    b.free(routed);
    b.next_iteration();
  }
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,varying_sizes:largest"), *driver);
  const ReplayResult r = replay_verified(rt, b.trace());
  for (std::uint32_t it = 6; it < 10; ++it) {
    EXPECT_EQ(r.iterations[it].misses, 0u) << it;
    EXPECT_EQ(r.iterations[it].matches, allocations_per_iteration(2) + 1) << it;
    EXPECT_EQ(r.iterations[it].vmm_calls, 0u) << it;
    EXPECT_EQ(r.iterations[it].plans_installed, 0u) << it;
  }
  // What is still allocated is what the trace never frees, at the sizes it asked for.
  std::uint64_t never_freed = 0;
  std::unordered_map<std::uint64_t, std::uint64_t> live;
  for (const Event& e : b.trace().events) {
    if (e.kind == EventKind::Alloc) {
      live[e.id] = e.size;
    } else {
      live.erase(e.id);
    }
  }
  for (const auto& [id, size] : live) never_freed += size;
  EXPECT_EQ(rt.stats().allocated_bytes, never_freed);
}

// A tensor of the previous iteration still holding its slot's chunks (freed late) must not be
// overwritten: the new request for that slot is served dynamically.
TEST(RuntimeMatching, OccupiedChunksAreNeverHandedOutTwice) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:0"), *driver);
  const int device = 0;
  auto run_iteration = [&](bool keep_first) {
    void* a = rt.malloc(2 * kG, device, 0);
    void* b = rt.malloc(2 * kG, device, 0);
    std::memset(a, 0x5a, 64);
    rt.free(b, 2 * kG, device, 0);
    if (!keep_first) rt.free(a, 2 * kG, device, 0);
    return a;
  };
  run_iteration(false);
  rt.step();
  rt.wait_for_planning();
  ASSERT_EQ(rt.stats().plan_installs, 1u);
  void* kept = run_iteration(true);
  rt.step();
  void* again = rt.malloc(2 * kG, device, 0);
  EXPECT_NE(again, kept);
  std::memset(again, 0x11, 2 * kG);
  EXPECT_EQ(static_cast<unsigned char*>(kept)[0], 0x5a);
  EXPECT_GE(rt.stats().conflicts, 1u);
  rt.free(again, 2 * kG, device, 0);
  rt.free(kept, 2 * kG, device, 0);
  EXPECT_EQ(rt.stats().allocated_bytes, 0u);
}

}  // namespace
}  // namespace stalloc
