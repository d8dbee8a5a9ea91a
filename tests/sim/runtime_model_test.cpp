// The simulator's stalloc rows are the runtime: the same trace through `simulate` (unbacked
// driver) and through replay_trace on the memory-backed host driver must reserve the same bytes
// and make the same VMM calls in every iteration.
#include "sim/runtime_model.h"

#include <gtest/gtest.h>

#include <string>

#include "planner/trace/trace_io.h"
#include "sim/simulator.h"
#include "src/allocator.h"
#include "src/runtime_config.h"
#include "src/trace_replayer.h"
#include "vmm/host_driver.h"

namespace stalloc {
namespace {

void expect_sim_equals_replay(const std::string& file) {
  const Trace trace = read_trace(std::string(STALLOC_SOURCE_DIR) + "/tests/data/real/" + file);
  ModelOptions options;
  const SimResult sim = simulate(trace, file, "stalloc", options);

  vmm::HostDriverOptions host;
  host.granularity = options.granularity;
  auto driver = vmm::make_host_driver(host);
  Runtime runtime(parse_runtime_config("auto_step:false"), *driver);  // as stalloc replay
  ReplayOptions replay_options;
  replay_options.backward_thread = false;
  const ReplayResult replay = replay_trace(runtime, trace, replay_options);

  EXPECT_EQ(replay.failed_allocations, 0u);
  EXPECT_EQ(sim.peak_reserved_bytes, replay.peak_reserved_bytes) << file;
  ASSERT_EQ(sim.iteration_calls.size(), replay.iterations.size()) << file;
  for (std::size_t i = 0; i < replay.iterations.size(); ++i) {
    EXPECT_EQ(sim.iteration_calls[i].vmm(), replay.iterations[i].vmm_calls) << file << " iteration " << i;
  }
  EXPECT_GT(sim.iteration_calls.front().vmm(), 0u) << file;
}

TEST(RuntimeModel, SimulatorAndReplayAgreeOnRealCaptures) {
  expect_sim_equals_replay("fixed_seq128.trace");
  expect_sim_equals_replay("varlen_seq64-192.trace");
}

TEST(RuntimeModel, ConfigurationReachesTheRuntime) {
  const Trace trace = read_trace(std::string(STALLOC_SOURCE_DIR) + "/tests/data/real/fixed_seq128.trace");
  ModelOptions options;
  const SimResult fine = simulate(trace, "t", "stalloc", options);
  options.stalloc_conf = "granularity:32MiB";
  const SimResult coarse = simulate(trace, "t", "stalloc", options);
  // Whole 32 MiB chunks: the reserve is a multiple of them, and fewer calls are made.
  EXPECT_EQ(coarse.peak_reserved_bytes % (32u << 20), 0u);
  EXPECT_LT(coarse.iteration_calls.front().vmm(), fine.iteration_calls.front().vmm());
  options.stalloc_conf = "no_such_key:1";
  EXPECT_ANY_THROW(simulate(trace, "t", "stalloc", options));
}

}  // namespace
}  // namespace stalloc
