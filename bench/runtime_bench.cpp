// Cost of the runtime allocator's entry points on the host backend: a planned malloc+free pair
// (the steady-state path: the target is a median <= 100 ns), and the same pair with no plan,
// served by the packed arenas (a large request, then a small one). The planned pair checks and
// marks the occupancy of every chunk of its slot, so it is also measured with tensors of 8 and
// 64 chunks (16 and 128 MiB at G = 2 MiB, the activations of a 7B model). A pair freed at
// once finds its slot's state in cache, so the steady iteration of generator presets is also
// measured: their tensors live as long as training keeps them, over thousands of slots.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "workload/generator.h"
#include "src/runtime.h"
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

// A preset's last iteration, replayed again and again (one thread, in the trace's order) after
// the earlier ones installed the plan. A free of a tensor of the iteration before goes to the
// tensor of the same ordinal of the previous replay, which the plan put in the same slot.
void BM_PlannedIteration(benchmark::State& state, const char* preset_name) {
  stalloc::GeneratorConfig config = stalloc::preset(preset_name);
  config.iterations = 4;
  const stalloc::Trace trace = stalloc::generate_trace(config);
  const std::uint32_t last = trace.events.back().iteration;
  stalloc::vmm::HostDriverOptions o;
  o.granularity = kG;
  auto driver = stalloc::vmm::make_host_driver(o);
  Runtime runtime(stalloc::parse_runtime_config("backend:host,auto_step:false"), *driver);

  // The last two iterations' allocations: which of the two, and the ordinal within it.
  struct Origin {
    bool in_last = false;
    std::size_t ordinal = 0;
  };
  std::unordered_map<std::uint64_t, Origin> origin;
  std::vector<std::size_t> count(last + 1, 0);
  for (const stalloc::Event& e : trace.events) {
    if (e.kind == stalloc::EventKind::Alloc && e.iteration + 1 >= last) {
      origin[e.id] = {e.iteration == last, count[e.iteration]++};
    }
  }
  if (count[last] != count[last - 1]) {
    state.SkipWithError("the last two iterations differ in their allocations");
    return;
  }
  std::unordered_map<std::uint64_t, void*> live;
  std::vector<void*> previous(count[last], nullptr);  // by ordinal: the iteration before's
  std::uint32_t iteration = 0;
  for (const stalloc::Event& e : trace.events) {
    if (e.iteration == last) break;
    if (e.iteration != iteration) {
      runtime.step();
      runtime.wait_for_planning();
      iteration = e.iteration;
    }
    if (e.kind == stalloc::EventKind::Alloc) {
      void* p = runtime.malloc(e.size, 0, e.stream);
      live[e.id] = p;
      if (e.iteration + 1 == last) previous[origin[e.id].ordinal] = p;
    } else if (auto it = live.find(e.id); it != live.end()) {
      runtime.free(it->second, e.size, 0, e.stream);
      live.erase(it);
      if (auto from = origin.find(e.id); from != origin.end()) {
        previous[from->second.ordinal] = nullptr;
      }
    }
  }
  runtime.step();
  runtime.wait_for_planning();
  const stalloc::RuntimeStats before = runtime.stats();
  if (before.plan_failures != 0) {
    // An alias plan over the mapping limit (the host backend: vm.max_map_count) is planned
    // again windowed, whose steady iteration maps and unmaps.
    const std::string why = "the alias plan was not installed: " + before.last_plan_error;
    state.SkipWithError(why.c_str());
    return;
  }

  // The last iteration's events, resolved beforehand so that the timed loop only calls the
  // runtime: an allocation's ordinal, or what a free names.
  enum class Op { Alloc, FreeCurrent, FreePrevious, FreeEarlier };
  struct Step {
    Op op = Op::Alloc;
    std::uint64_t size = 0;
    std::uint32_t stream = 0;
    std::size_t ordinal = 0;
    void* earlier = nullptr;  // FreeEarlier: a tensor of the iterations before the last two
  };
  std::vector<Step> steps;
  for (const stalloc::Event& e : trace.events) {
    if (e.iteration != last) continue;
    Step step{Op::Alloc, e.size, e.stream, 0, nullptr};
    const auto it = origin.find(e.id);
    if (it != origin.end()) {
      step.ordinal = it->second.ordinal;
      if (e.kind == stalloc::EventKind::Free) {
        step.op = it->second.in_last ? Op::FreeCurrent : Op::FreePrevious;
      }
    } else if (auto l = live.find(e.id); l != live.end()) {
      step.op = Op::FreeEarlier;
      step.earlier = l->second;
    } else {
      continue;
    }
    steps.push_back(step);
  }

  std::vector<void*> current(count[last], nullptr);
  std::uint64_t leaked = 0;
  for (auto _ : state) {
    for (Step& step : steps) {
      void* p = nullptr;
      switch (step.op) {
        case Op::Alloc:
          current[step.ordinal] = runtime.malloc(step.size, 0, step.stream);
          continue;
        case Op::FreeCurrent:
          p = std::exchange(current[step.ordinal], nullptr);
          break;
        case Op::FreePrevious:
          p = std::exchange(previous[step.ordinal], nullptr);
          break;
        case Op::FreeEarlier:  // the first replay only
          p = std::exchange(step.earlier, nullptr);
          break;
      }
      if (p != nullptr) runtime.free(p, step.size, 0, step.stream);
    }
    state.PauseTiming();
    for (void* p : previous) leaked += p != nullptr;
    previous.swap(current);
    std::fill(current.begin(), current.end(), nullptr);
    runtime.step();
    state.ResumeTiming();
  }
  const stalloc::RuntimeStats after = runtime.stats();
  if (leaked != 0) {
    state.SkipWithError("tensors of one iteration outlived the next");
  } else if (after.misses != before.misses || after.conflicts != before.conflicts ||
             after.vmm_calls() != before.vmm_calls()) {
    state.SkipWithError("the steady iteration left its plan");
  }
  // Seconds per malloc+free pair (printed with an SI prefix: "250n" is 250 ns).
  const double pairs = static_cast<double>(count[last]);
  state.counters["pairs"] = pairs;
  state.counters["per_pair"] = benchmark::Counter(
      pairs, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK_CAPTURE(BM_PlannedIteration, llama7b_tp2pp2_r, "llama7b-tp2pp2-r")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlannedIteration, llama7b_tp4pp2vpp2, "llama7b-tp4pp2vpp2")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlannedIteration, gpt2_1024_mbs128_r, "gpt2-1024-mbs128-r")
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
