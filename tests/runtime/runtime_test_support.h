// Hand-made training-like traces and runtimes on the host backend for the runtime tests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trace/trace.h"
#include "trace/trace_builder.h"
#include "src/runtime.h"
#include "src/physical_memory.h"
#include "src/plan_pool.h"
#include "src/reclaimer.h"
#include "src/trace_replayer.h"
#include "vmm/driver.h"
#include "vmm/host_driver.h"

namespace stalloc::testing_support {

// Small chunks keep the tests fast and let them use many chunks.
inline constexpr std::uint64_t kG = 64 * 1024;

// A Reclaimer whose answers a test sets: by default it gives nothing, splits no run and allows
// any number of mappings.
struct TestReclaimer final : Reclaimer {
  std::function<bool(const PackedArena*)> chunk = [](const PackedArena*) { return false; };
  std::function<bool(std::uint32_t)> split = [](std::uint32_t) { return false; };
  std::function<std::uint64_t(std::uint64_t)> room = [](std::uint64_t) { return UINT64_MAX; };
  bool chunk_for_arena(const PackedArena* asking) override { return chunk(asking); }
  void bytes_for_range(std::uint64_t) override {}
  bool split_run(std::uint32_t head) override { return split(head); }
  std::uint64_t mapping_room(std::uint64_t needed) override { return room(needed); }
};

// The trace builder with each request's thread given per call, and its free issued by the
// thread that allocated it.
class ThreadedTraceBuilder : public stalloc::TraceBuilder {
 public:
  std::uint64_t alloc(std::uint64_t size, std::uint32_t stream = 0, std::uint16_t thread = 0) {
    stamp().thread = thread;
    return stalloc::TraceBuilder::alloc(size, stream);
  }
  void free(std::uint64_t id) {
    if (const Event* allocation = live(id)) stamp().thread = allocation->thread;
    stalloc::TraceBuilder::free(id);
  }
};

// One training iteration: forward keeps `layers` activations (size act + layer), each with a
// temporary freed at once; backward (thread 1) frees them in reverse with a gradient each; the
// optimizer makes two small requests. Iteration 0 also allocates persistent weights.
void add_training_iteration(ThreadedTraceBuilder& b, std::uint64_t act, int layers = 4);
Trace periodic_trace(int iterations, std::uint64_t act = 2 * kG + 4096, int layers = 4);

// The GPU lag of STALLOC_TEST_GPU_LAG (queries) and STALLOC_TEST_GPU_LAG_SEED; none if unset.
// CI runs the runtime tests once without and once with it.
vmm::HostLag lag_from_environment();
// A host driver of granularity kG, with the lag of the environment.
std::unique_ptr<vmm::Driver> host_driver(std::size_t max_bytes = 0, std::size_t max_mappings = 0);
RuntimeConfig test_config(const std::string& conf = "");
// Replays with data patterns checked; expects no pattern broken, no allocation failed, and no
// memory unmapped or shared before the GPU work that used it is known done.
ReplayResult replay_verified(Runtime& rt, const Trace& trace);

// Allocations per iteration (iteration > 0) of add_training_iteration.
std::uint64_t allocations_per_iteration(int layers = 4);

// A plan pool grown in runs of these lengths (pool_runs.h), on a host driver.
struct PoolOfRuns {
  explicit PoolOfRuns(const std::vector<std::uint32_t>& runs);
  std::unique_ptr<vmm::Driver> host;
  PhysicalMemory memory;
  PlanPool pool;
};

}  // namespace stalloc::testing_support
