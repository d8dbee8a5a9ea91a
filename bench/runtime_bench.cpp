// Cost of the runtime allocator's entry points on the host backend: a planned malloc+free pair
// (the steady-state path: the target is a median <= 100 ns), and the same pair with no plan,
// served by the packed arenas (a large request, then a small one). The planned pair checks and
// marks the occupancy of every chunk of its slot, so it is also measured with tensors of 8 and
// 64 chunks (16 and 128 MiB at G = 2 MiB, the activations of a 7B model).
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "src/allocator.h"
#include "vmm/host_driver.h"

namespace {

using stalloc::Runtime;
using stalloc::RuntimeConfig;

constexpr std::uint64_t kG = 2ull << 20;
constexpr int kPairsPerIteration = 256;

// The i-th request of an iteration: `small` bytes, or a few sizes just above `chunks` chunks.
struct Requests {
  std::uint64_t small = 0;
  std::uint64_t chunks = 1;
  std::uint64_t size(int i) const {
    return small != 0 ? small : chunks * kG + 4096 * static_cast<std::uint64_t>(i % 8);
  }
};

struct Fixture {
  std::unique_ptr<stalloc::vmm::Driver> driver;
  std::unique_ptr<Runtime> runtime;
};

// One iteration = kPairsPerIteration malloc/free pairs of a few sizes; after two profiling
// iterations the plan is installed and every pair is served from its slot.
Fixture make_fixture(bool planned, Requests requests) {
  Fixture f;
  stalloc::vmm::HostDriverOptions o;
  o.granularity = kG;
  f.driver = stalloc::vmm::make_host_driver(o);
  RuntimeConfig c = stalloc::parse_runtime_config("backend:host,auto_step:false");
  c.profile_iterations = planned ? 1 : 1000000;
  f.runtime = std::make_unique<Runtime>(c, *f.driver);
  for (int it = 0; it < 3; ++it) {
    for (int i = 0; i < kPairsPerIteration; ++i) {
      const std::uint64_t size = requests.size(i);
      void* p = f.runtime->malloc(size, 0, 0);
      f.runtime->free(p, size, 0, 0);
    }
    f.runtime->step();
    f.runtime->wait_for_planning();
  }
  return f;
}

void run_pairs(benchmark::State& state, Fixture& f, Requests requests) {
  int i = 0;
  for (auto _ : state) {
    const std::uint64_t size = requests.size(i);
    void* p = f.runtime->malloc(size, 0, 0);
    benchmark::DoNotOptimize(p);
    f.runtime->free(p, size, 0, 0);
    if (++i == kPairsPerIteration) {
      i = 0;
      f.runtime->step();
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void check_planned(benchmark::State& state, const Fixture& f) {
  const auto s = f.runtime->stats();
  if (s.plan_installs != 1 || s.misses != 0) state.SkipWithError("the plan was not followed");
}

void BM_PlannedMallocFree(benchmark::State& state) {
  Fixture f = make_fixture(true, {});
  run_pairs(state, f, {});
  check_planned(state, f);
}
BENCHMARK(BM_PlannedMallocFree);

void BM_PlannedSmallMallocFree(benchmark::State& state) {
  Fixture f = make_fixture(true, {256});
  run_pairs(state, f, {256});
  check_planned(state, f);
}
BENCHMARK(BM_PlannedSmallMallocFree);

// Argument: chunks per tensor.
void BM_PlannedLargeMallocFree(benchmark::State& state) {
  const Requests requests{0, static_cast<std::uint64_t>(state.range(0))};
  Fixture f = make_fixture(true, requests);
  run_pairs(state, f, requests);
  check_planned(state, f);
}
BENCHMARK(BM_PlannedLargeMallocFree)->Arg(8)->Arg(64);

void BM_UnplannedMallocFree(benchmark::State& state) {
  Fixture f = make_fixture(false, {});
  run_pairs(state, f, {});
}
BENCHMARK(BM_UnplannedMallocFree);

void BM_UnplannedSmallMallocFree(benchmark::State& state) {
  Fixture f = make_fixture(false, {256});
  run_pairs(state, f, {256});
}
BENCHMARK(BM_UnplannedSmallMallocFree);

}  // namespace

BENCHMARK_MAIN();
