// The simulator's stalloc rows are the runtime: the same trace through `simulate` (unbacked
// driver) and through replay_trace on the memory-backed host driver must reserve the same bytes
// and make the same VMM calls in every iteration.
#include "sim/runtime_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trace/import_pytorch.h"
#include "trace/trace_io.h"
#include "sim/simulator.h"
#include "src/runtime.h"
#include "src/runtime_config.h"
#include "src/trace_replayer.h"
#include "vmm/host_driver.h"

namespace stalloc {
namespace {

void expect_sim_equals_replay(const Trace& trace, const std::string& file) {
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

void expect_sim_equals_replay(const std::string& file) {
  expect_sim_equals_replay(
      read_trace(std::string(STALLOC_SOURCE_DIR) + "/tests/data/real/" + file), file);
}

TEST(RuntimeModel, SimulatorAndReplayAgreeOnRealCaptures) {
  expect_sim_equals_replay("fixed_seq128.trace");
  expect_sim_equals_replay("varlen_seq64-192.trace");
}

// Three of the real GPU snapshots, imported as `stalloc sim --suite real` imports them: one whose
// plan is followed (lm-small-forward-ctx150) and two whose plans are declined and served online
// (cnn-optimisation-loop, 10 iterations; lm-small-train-ctx100).
TEST(RuntimeModel, SimulatorAndReplayAgreeOnRealSnapshots) {
  for (const std::string name :
       {"lm-small-forward-ctx150", "cnn-optimisation-loop", "lm-small-train-ctx100"}) {
    const std::string path =
        std::string(STALLOC_SOURCE_DIR) + "/tests/data/snapshots/" + name + ".pickle";
    const std::vector<Trace> traces = import_pytorch_snapshot(read_file_bytes(path), path);
    ASSERT_EQ(traces.size(), 1u) << name;
    expect_sim_equals_replay(traces.front(), name);
  }
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
