#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "trace/safe_unpickler.h"
#include "trace/trace.h"
#include "trace/trace_io.h"
#include "src/trace_replayer.h"
#include "tests/runtime/runtime_test_support.h"
#include "vmm/host_driver.h"

namespace stalloc {
namespace {

using namespace testing_support;

TEST(RuntimeLifecycle, ProfilePlanReplayInAliasMode) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  const Trace trace = periodic_trace(6);
  ReplayOptions options;
  options.verify = true;
  ReplayResult r = replay_trace(rt, trace, options);

  EXPECT_EQ(r.verify_errors, 0u);
  EXPECT_EQ(r.failed_allocations, 0u);
  ASSERT_EQ(r.iterations.size(), 6u);
  // Iterations 0 (warm-up) and 1 (profiled) run on the dynamic path; the plan of iteration 1
  // is installed at its end.
  EXPECT_EQ(r.iterations[0].matches, 0u);
  EXPECT_EQ(r.iterations[1].matches, 0u);
  EXPECT_EQ(r.iterations[1].plans_installed, 1u);
  for (std::size_t i = 2; i < 6; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    EXPECT_EQ(r.iterations[i].matches, allocations_per_iteration());
    EXPECT_EQ(r.iterations[i].misses, 0u);
    EXPECT_EQ(r.iterations[i].conflicts, 0u);
    EXPECT_EQ(r.iterations[i].vmm_calls, 0u);
  }
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.plan_installs, 1u);
  EXPECT_EQ(s.plans_declined, 0u);  // as tight as the profiled iterations
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_GE(s.peak_reserved_bytes, lower_bound_bytes(trace));
  EXPECT_EQ(s.invalid_frees, 0u);
}

// A trace replayed (verify on) with pool runs and with pool_runs:false. Activations of 8 or
// more chunks, in ranges of their own while profiled (large_size), so that the pool is made,
// not taken from the cache.
struct WithAndWithoutRuns {
  explicit WithAndWithoutRuns(const Trace& trace)
      : with(host_driver()),
        without(host_driver()),
        runs(test_config(conf()), *with),
        singles(test_config(conf() + ",pool_runs:false"), *without) {
    ReplayOptions options;
    options.verify = true;
    r = replay_trace(runs, trace, options);
    s = replay_trace(singles, trace, options);
    EXPECT_EQ(r.verify_errors, 0u);
    EXPECT_EQ(r.failed_allocations, 0u);
    EXPECT_EQ(r.unmapped_uses, 0u);
    EXPECT_EQ(s.verify_errors, 0u);
  }
  static std::string conf() { return "profile_iterations:1,large_size:" + std::to_string(4 * kG); }
  std::unique_ptr<vmm::Driver> with;
  std::unique_ptr<vmm::Driver> without;
  Runtime runs;
  Runtime singles;
  ReplayResult r;
  ReplayResult s;
};

// A workload whose sizes settled (every iteration alike) gets a pool whose chunks held together
// share a handle: fewer creates and maps than with pool_runs:false, the same memory, the same
// matches, and the data of every tensor intact.
TEST(RuntimeLifecycle, ASettledWorkloadsPoolIsMadeOfRuns) {
  WithAndWithoutRuns t(periodic_trace(6, 8 * kG - 100));
  EXPECT_LT(t.with->counters().creates, t.without->counters().creates);
  EXPECT_LT(t.with->counters().maps, t.without->counters().maps);
  EXPECT_EQ(t.runs.stats().peak_reserved_bytes, t.singles.stats().peak_reserved_bytes);
  ASSERT_EQ(t.r.iterations.size(), 6u);
  for (std::size_t i = 2; i < 6; ++i) {
    EXPECT_EQ(t.r.iterations[i].matches, allocations_per_iteration()) << i;
    EXPECT_EQ(t.r.iterations[i].vmm_calls, 0u) << i;
  }
  EXPECT_EQ(t.runs.stats().runs_split, 0u);
}

// A settled workload whose activations then grow (a longer sequence): the iteration that leaves
// the plan finds the pool in runs, and the lender splits them (the views keep their mappings,
// the runs' chunks mapped one by one in their place) so that the arenas borrow them as before;
// the tensors' data intact, and no more memory than with pool_runs:false. Under the GPU lag of
// STALLOC_TEST_GPU_LAG too (a split then waits for the device, once in the iteration).
TEST(RuntimeLifecycle, RunsAreSplitWhenTheWorkloadLeavesItsPlan) {
  ThreadedTraceBuilder b;
  for (int w = 0; w < 3; ++w) b.alloc(3 * kG + 100);
  for (int i = 0; i < 8; ++i) {
    add_training_iteration(b, (i < 4 ? 8 : 12) * kG - 100);
    b.next_iteration();
  }
  WithAndWithoutRuns t(b.trace());
  EXPECT_GT(t.runs.stats().runs_split, 0u);
  EXPECT_LE(t.runs.stats().peak_reserved_bytes, t.singles.stats().peak_reserved_bytes);
}

// A granularity set in STALLOC_CONF may be a multiple of the driver's (CUDA's is 2 MiB, a user
// may plan at 32 MiB): plans are made and installed at the runtime's granularity.
// While no plan is followed, a tensor of at least large_size gets a dedicated range (one chunk,
// one mapping); with large_size:0 it is packed on pages like the others.
// A plan is installed unmapped. Planned in the background, it may be installed after an
// iteration of another signature (sequence lengths that changed, as in llama7b-varlen): it is
// then not mapped at that boundary, nor while another plan is followed, only at its first
// match. One installed after an iteration of its own signature has its first stage of views
// mapped at the boundary (plans_unmapped counts plans with no stage mapped).
TEST(RuntimeLifecycle, APlanIsMappedAtItsFirstMatchUnlessItsSignatureWasJustSeen) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1,varying_sizes:off"), *driver);
  const std::uint64_t a = 2 * kG + 4096;
  const std::uint64_t b = 3 * kG + 8192;
  auto iteration = [&](std::uint64_t act, bool install_after_first) {
    std::vector<void*> acts;
    for (int l = 0; l < 8; ++l) {
      acts.push_back(rt.malloc(act + static_cast<std::uint64_t>(l) * 512, 0, 0));
      ASSERT_NE(acts.back(), nullptr);
      // Installs what was planned meanwhile, as a boundary would, but in mid-iteration: the plan
      // is not chosen until the iteration ends.
      if (l == 0 && install_after_first) rt.wait_for_planning();
    }
    for (void* p : acts) rt.free(p, 0, 0, 0);
    rt.step();
  };
  iteration(a, false);
  iteration(a, false);  // A planned at its end, in the background
  iteration(b, true);   // A's plan installed; B planned at its end
  EXPECT_EQ(rt.stats().plans_unmapped, 1u);
  rt.wait_for_planning();  // B's plan installed after B: mapped
  EXPECT_EQ(rt.stats().plans_installed, 2u);
  EXPECT_EQ(rt.stats().plans_unmapped, 1u);
  std::uint64_t matches = rt.stats().matches;
  iteration(b, false);
  EXPECT_EQ(rt.stats().matches - matches, 8u);
  EXPECT_EQ(rt.stats().plans_unmapped, 1u);
  matches = rt.stats().matches;
  iteration(a, false);  // switches to A's plan at its first request, which maps it
  EXPECT_EQ(rt.stats().matches - matches, 8u);
  EXPECT_EQ(rt.stats().plans_unmapped, 0u);
}

// A plan that would make the runtime hold more than 1% above what the profiled iterations held
// at most is declined and the iterations go on online. fixed_seq128 (a libtorch capture,
// tests/data/real): the weights made while profiling leave holes in the arenas' pages that the
// online path's temporaries fill and a plan's pool cannot; following its plan, the run reached
// 97.87% utilization (stalloc sim, before the rule), online it reaches 99.79%.
TEST(RuntimeLifecycle, APlanThatWouldHoldMoreThanTheOnlinePathIsDeclined) {
  const Trace trace =
      read_trace(std::string(STALLOC_SOURCE_DIR) + "/tests/data/real/fixed_seq128.trace");
  vmm::HostDriverOptions o;
  o.granularity = 2 << 20;  // as the simulator
  auto driver = vmm::make_host_driver(o);
  const std::string log = ::testing::TempDir() + "/declined.log";
  std::remove(log.c_str());
  Runtime rt(test_config("log:" + log), *driver);
  const ReplayResult r = replay_verified(rt, trace);
  EXPECT_EQ(rt.stats().plans_declined, 1u);
  EXPECT_EQ(rt.stats().plan_installs, 0u);
  EXPECT_GE(static_cast<double>(r.peak_allocated_bytes),
            0.99 * static_cast<double>(r.peak_reserved_bytes));
  std::ifstream in(log);
  const std::string logged((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(logged.find("plan of iteration 1 declined"), std::string::npos) << logged;
}

// Pages emptied while the GPU may still use them stay mapped until their events complete: they
// hold no tensor and do not count against a plan. A plan within 1% of the profiled iterations
// (32 activations of 4 chunks at G = 2 MiB; the weights' page beside it) is followed while the
// GPU lags (events complete only after 1,000 queries).
TEST(RuntimeLifecycle, ATightPlanIsFollowedWhileTheGpuStillUsesEmptiedPages) {
  vmm::HostDriverOptions o;
  o.granularity = 2 << 20;
  o.lag.queries = 1000;
  auto driver = vmm::make_host_driver(o);
  Runtime rt(test_config("profile_iterations:1"), *driver);
  const Trace trace = periodic_trace(5, (8 << 20) - 8192, 32);
  const ReplayResult r = replay_verified(rt, trace);
  EXPECT_EQ(rt.stats().plans_declined, 0u);
  EXPECT_EQ(rt.stats().plan_installs, 1u);
  ASSERT_EQ(r.iterations.size(), 5u);
  EXPECT_EQ(r.iterations[4].matches, allocations_per_iteration(32));
}

TEST(RuntimeLifecycle, LargeUnplannedTensorsGetADedicatedRange) {
  for (const bool dedicated : {true, false}) {
    auto driver = host_driver();
    Runtime rt(test_config(dedicated ? "large_size:" + std::to_string(8 * kG) : "large_size:0"), *driver);
    const auto before = driver->counters();
    void* p = rt.malloc(20 * kG, 0, 0);
    ASSERT_NE(p, nullptr);
    std::memset(p, 3, 20 * kG);
    const auto after = driver->counters();
    EXPECT_EQ(rt.stats().dedicated_bytes, dedicated ? 20 * kG : 0u);
    EXPECT_EQ(after.maps - before.maps, dedicated ? 1u : 20u);
    EXPECT_EQ(after.creates - before.creates, dedicated ? 1u : 20u);
    rt.free(p, 20 * kG, 0, 0);
    EXPECT_EQ(rt.stats().dedicated_bytes, 0u);
    EXPECT_EQ(rt.stats().invalid_frees, 0u);
    rt.empty_cache();
    EXPECT_EQ(rt.stats().reserved_bytes, 0u);
  }
}

// While the runtime holds less than 128 MiB, a small request shares a page with a large one;
// from then on small requests get pages of their own (their arena apart), and their data
// survive either way.
TEST(RuntimeLifecycle, SmallRequestsGetPagesApartOnlyOnceTheRuntimeHoldsMore) {
  auto driver = host_driver();
  Runtime rt(test_config("small_size:" + std::to_string(kG / 4) + ",large_size:" +
                         std::to_string(32 * kG)),
             *driver);
  auto pair = [&](std::uint64_t* grown) {
    const std::uint64_t before = rt.stats().reserved_bytes;
    auto* large = static_cast<unsigned char*>(rt.malloc(kG / 2, 0, 0));
    auto* small = static_cast<unsigned char*>(rt.malloc(4096, 0, 0));
    EXPECT_NE(large, nullptr);
    EXPECT_NE(small, nullptr);
    if (large == nullptr || small == nullptr) return;
    std::memset(large, 1, kG / 2);
    std::memset(small, 2, 4096);
    EXPECT_EQ(large[kG / 2 - 1], 1);
    EXPECT_EQ(small[0], 2);
    *grown = rt.stats().reserved_bytes - before;
    rt.free(small, 4096, 0, 0);
    rt.free(large, kG / 2, 0, 0);
  };
  std::uint64_t grown = 0;
  pair(&grown);
  EXPECT_EQ(grown, kG);  // one page holds both
  const std::uint64_t big = std::uint64_t{128} << 20;  // a dedicated range: the runtime holds 128 MiB
  void* held = rt.malloc(big, 0, 0);
  ASSERT_NE(held, nullptr);
  ASSERT_GE(rt.stats().reserved_bytes, big);
  rt.empty_cache();  // the first pair's page goes: the next pair makes its pages anew
  pair(&grown);
  EXPECT_EQ(grown, 2 * kG);  // a page each
  rt.free(held, big, 0, 0);
  EXPECT_EQ(rt.stats().invalid_frees, 0u);
}

// online_page: before the first plan, large requests take pages of that size (one chunk made
// and mapped per page); the plan is installed and followed as with pages of the granularity,
// and data survive both.
TEST(RuntimeLifecycle, OnlinePagesServeTheProfiledIterationsWithFewerChunks) {
  const Trace trace = periodic_trace(5, 6 * kG + 4096);
  std::uint64_t first_calls[2] = {0, 0};
  for (const bool large_pages : {false, true}) {
    auto driver = host_driver();
    // Requests above half a granule go to the large arena (kG is 64 KiB here).
    const std::string sizes = "small_size:" + std::to_string(kG / 2) + ",large_size:0,";
    Runtime rt(test_config(sizes + "online_page:" + std::to_string(large_pages ? 4 * kG : 0)),
               *driver);
    ReplayOptions options;
    options.verify = true;
    const ReplayResult r = replay_trace(rt, trace, options);
    EXPECT_EQ(r.verify_errors, 0u);
    EXPECT_EQ(r.failed_allocations, 0u);
    EXPECT_EQ(rt.stats().plan_installs, 1u);
    ASSERT_EQ(r.iterations.size(), 5u);
    EXPECT_EQ(r.iterations[4].matches, allocations_per_iteration());
    EXPECT_EQ(r.iterations[4].vmm_calls, 0u);
    first_calls[large_pages ? 1 : 0] = r.iterations[0].vmm_calls;
  }
  EXPECT_LT(2 * first_calls[1], first_calls[0]);
}

// extent_size: a workload served online (one iteration, never planned) that grows past its
// high water makes one chunk for each run of fresh pages an allocation needs, not one per page;
// the data survive, and it holds no more memory than with a chunk per page (iteration 1 repeats
// iteration 0's requests on the pages kept mapped). 2,570 creates -> 1,026.
TEST(RuntimeLifecycle, ExtentsCutTheCreatesOfAnOnlineWorkload) {
  ThreadedTraceBuilder b;
  for (int it = 0; it < 2; ++it) {
    std::vector<std::uint64_t> ids;
    // 160 tensors of 1 MiB + 4 KiB (16 granules of 64 KiB and a part): 161 MiB held at the end,
    // where extents reach 1/256 of it, 10 granules.
    for (int i = 0; i < 160; ++i) ids.push_back(b.alloc((std::uint64_t{1} << 20) + 4096));
    for (std::uint64_t id : ids) b.free(id);
    b.next_iteration();
  }
  std::uint64_t creates[2] = {0, 0};
  std::uint64_t peak[2] = {0, 0};
  for (const bool extents : {false, true}) {
    auto driver = host_driver();
    Runtime rt(test_config(std::string("profile_iterations:1000,extent_size:") +
                           (extents ? "12MiB" : "0")),
               *driver);
    ReplayOptions options;
    options.verify = true;
    const ReplayResult r = replay_trace(rt, b.trace(), options);
    EXPECT_EQ(r.verify_errors, 0u);
    EXPECT_EQ(r.failed_allocations, 0u);
    EXPECT_EQ(rt.stats().plan_installs, 0u);
    creates[extents ? 1 : 0] = driver->counters().creates;
    peak[extents ? 1 : 0] = rt.stats().peak_reserved_bytes;
  }
  EXPECT_LT(2 * creates[1], creates[0]) << creates[1] << " vs " << creates[0];
  EXPECT_LE(peak[1], peak[0]);
}

// A plan installed while the GPU is behind (events complete only after 3 queries): the pages
// the profiled iterations emptied still wait for their events, so the pool, made now, would sit
// beside them. One wait for the device first: the pool takes their chunks, and the runtime
// holds no more than it does when the GPU keeps up.
TEST(RuntimeLifecycle, APlanInstalledWhileTheGpuIsBehindWaitsRatherThanGrowBeside) {
  const Trace trace = periodic_trace(4, 6 * kG + 4096);
  std::uint64_t peak[2] = {0, 0};
  for (const std::uint32_t lag : {0u, 3u}) {
    vmm::HostDriverOptions o;
    o.granularity = kG;
    o.lag.queries = lag;
    auto driver = vmm::make_host_driver(o);
    Runtime rt(test_config(), *driver);
    const ReplayResult r = replay_verified(rt, trace);
    EXPECT_EQ(rt.stats().plan_installs, 1u) << lag;
    EXPECT_EQ(rt.stats().install_waits, lag > 0 ? 1u : 0u);
    peak[lag > 0 ? 1 : 0] = r.peak_reserved_bytes;
  }
  EXPECT_LE(peak[1], peak[0]);
}

// Gradients made in backward and freed by the next step's zero_grad: planned wrapped around
// the iteration's end, they share chunks with the forward's activations, every request of the
// planned iterations takes its slot and the data survive.
TEST(RuntimeLifecycle, GradientsCarriedIntoTheNextIterationShareTheActivationsChunks) {
  ThreadedTraceBuilder b;
  std::uint64_t grad = UINT64_MAX;
  for (int it = 0; it < 6; ++it) {
    const std::uint64_t input = b.alloc(2 * kG);
    if (grad != UINT64_MAX) b.free(grad);
    const std::uint64_t a1 = b.alloc(6 * kG);
    const std::uint64_t a2 = b.alloc(6 * kG);
    b.free(a2);
    grad = b.alloc(6 * kG);
    b.free(a1);
    b.free(input);
    b.next_iteration();
  }
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  ReplayOptions options;
  options.verify = true;
  const ReplayResult r = replay_trace(rt, b.trace(), options);
  EXPECT_EQ(r.verify_errors, 0u);
  EXPECT_EQ(r.failed_allocations, 0u);
  ASSERT_EQ(r.iterations.size(), 6u);
  for (std::size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(r.iterations[i].matches, 4u) << i;
    EXPECT_EQ(r.iterations[i].conflicts, 0u) << i;
    EXPECT_EQ(r.iterations[i].vmm_calls, 0u) << i;
  }
  // Input, the last gradient, then input and two activations: 14 chunks at most; with the
  // gradient's slot over the whole iteration the pool alone took 20.
  EXPECT_EQ(rt.stats().pool_bytes, 14 * kG);
}

TEST(RuntimeLifecycle, PlansAtAMultipleOfTheDriversGranularity) {
  auto driver = host_driver();
  Runtime rt(test_config("granularity:" + std::to_string(4 * kG)), *driver);
  ASSERT_EQ(rt.granularity(), 4 * kG);
  ReplayOptions options;
  options.verify = true;
  const ReplayResult r = replay_trace(rt, periodic_trace(5), options);
  EXPECT_EQ(r.verify_errors, 0u);
  EXPECT_EQ(rt.stats().plan_failures, 0u) << rt.stats().last_plan_error;
  EXPECT_EQ(rt.stats().plan_installs, 1u);
  EXPECT_EQ(r.iterations[4].matches, allocations_per_iteration());
  EXPECT_EQ(r.iterations[4].vmm_calls, 0u);
}

TEST(RuntimeLifecycle, WindowedModeMapsAroundUseAndKeepsData) {
  auto driver = host_driver();
  Runtime rt(test_config("mode:windowed,windows:4"), *driver);
  ReplayOptions options;
  options.verify = true;
  ReplayResult r = replay_trace(rt, periodic_trace(6), options);
  EXPECT_EQ(r.verify_errors, 0u);
  ASSERT_EQ(r.iterations.size(), 6u);
  for (std::size_t i = 2; i < 6; ++i) {
    EXPECT_EQ(r.iterations[i].matches, allocations_per_iteration());
    EXPECT_EQ(r.iterations[i].misses, 0u);
  }
  // Windowed mode changes mappings every iteration, and the same number each steady one.
  EXPECT_GT(r.iterations[4].vmm_calls, 0u);
  EXPECT_EQ(r.iterations[4].vmm_calls, r.iterations[5].vmm_calls);
}

TEST(RuntimeLifecycle, NoPlanBeforeProfilingEnds) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:4"), *driver);
  ReplayResult r = replay_trace(rt, periodic_trace(4), {});
  EXPECT_EQ(rt.stats().plan_installs, 0u);
  for (const auto& it : r.iterations) EXPECT_EQ(it.matches, 0u);
}

TEST(RuntimeLifecycle, SavedTraceHoldsTheProfiledIterations) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  replay_trace(rt, periodic_trace(4), {});
  const std::string path = ::testing::TempDir() + "/runtime_saved.trace";
  rt.save_trace(path);
  Trace saved = read_trace(path);
  EXPECT_EQ(validate_trace(saved), "");
  std::uint64_t allocations = 0;
  std::uint32_t last_iteration = 0;
  for (const Event& e : saved.events) {
    allocations += e.kind == EventKind::Alloc;
    last_iteration = std::max(last_iteration, e.iteration);
  }
  // Warm-up and the profiled iteration; the weights of iteration 0 stay live.
  EXPECT_EQ(last_iteration, 1u);
  EXPECT_EQ(allocations, 3 + 2 * allocations_per_iteration());

  const std::string snapshot = rt.snapshot_pickle();
  ASSERT_GT(snapshot.size(), 2u);
  EXPECT_EQ(snapshot.substr(0, 2), std::string("\x80\x02"));
  EXPECT_NE(snapshot.find("device_traces"), std::string::npos);
}

// Blocks per segment of a snapshot, read back with the project's own unpickler.
std::vector<std::size_t> snapshot_segment_blocks(const Runtime& rt) {
  const PickleDocument doc = unpickle(rt.snapshot_pickle(), "snapshot");
  std::vector<std::size_t> blocks;
  for (const PickleValue* seg : doc.root().find("segments")->items) {
    blocks.push_back(seg->find("blocks")->items.size());
  }
  return blocks;
}

// A plan's views share pool chunks, so the snapshot lists only those holding live tensors:
// between iterations (only the weights live, in the arenas) every segment has a block, and a
// planned tensor adds the one segment of its view.
TEST(RuntimeLifecycle, SnapshotListsOnlyViewsWithLiveTensors) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  replay_trace(rt, periodic_trace(4), {});
  ASSERT_EQ(rt.stats().plans_installed, 1u);
  const std::vector<std::size_t> between = snapshot_segment_blocks(rt);
  ASSERT_FALSE(between.empty());
  for (std::size_t n : between) EXPECT_GT(n, 0u);
  const std::uint64_t matches = rt.stats().matches;
  void* act = rt.malloc(2 * kG + 4096, 0, 0);  // the first request of periodic_trace's iterations
  ASSERT_NE(act, nullptr);
  ASSERT_EQ(rt.stats().matches, matches + 1);
  const std::vector<std::size_t> during = snapshot_segment_blocks(rt);
  EXPECT_EQ(during.size(), between.size() + 1);
  rt.free(act, 2 * kG + 4096, 0, 0);
}

}  // namespace
}  // namespace stalloc
