// Physical-chunk planner on the generator's presets: utilization (lower bound / pool), pool
// chunks, mappings and VMM calls per iteration for every mode, and the planning time. Results
// and the command are in docs/benchmarks.md, "Physical-chunk planner".
#include <benchmark/benchmark.h>

#include <map>
#include <mutex>
#include <string>

#include "planner/chunk/chunk_plan.h"
#include "planner/chunk/plan_validator.h"
#include "workload/generator.h"

namespace {

using namespace stalloc;

const Trace& preset_trace(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, Trace> traces;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = traces.find(name);
  if (it == traces.end()) it = traces.emplace(name, generate_trace(preset(name))).first;
  return it->second;
}

std::uint64_t allocations_in(const Trace& trace, std::uint32_t iteration) {
  std::uint64_t n = 0;
  for (const Event& e : trace.events) n += e.iteration == iteration && e.kind == EventKind::Alloc;
  return n;
}

void plan_preset(benchmark::State& state, const std::string& name, PlanMode mode,
                 RemainderPlacement remainder) {
  const Trace& trace = preset_trace(name);
  const std::uint32_t iteration = 1;
  PlanOptions options;
  options.mode = mode;
  options.remainder = remainder;
  ChunkPlan plan;
  for (auto _ : state) {
    plan = plan_iteration(trace, iteration, options);
    benchmark::DoNotOptimize(plan.num_chunks);
  }
  const PlanValidation check = validate_plan(plan);
  if (!check.ok) state.SkipWithError(check.errors.front().c_str());
  state.counters["utilization_pct"] = 100.0 * plan_utilization(plan);
  state.counters["num_chunks"] = static_cast<double>(plan.num_chunks);
  state.counters["lower_bound_MiB"] = static_cast<double>(plan.lower_bound_bytes) / (1 << 20);
  state.counters["dynamic_MiB"] = static_cast<double>(plan.dynamic_peak_bytes) / (1 << 20);
  state.counters["mappings"] = static_cast<double>(plan.mappings);
  state.counters["vmm_ops_per_iter"] = static_cast<double>(plan.vmm_ops_per_iteration);
  state.counters["allocations"] = static_cast<double>(allocations_in(trace, iteration));
  state.SetLabel(std::string(remainder_placement_name(plan.remainder)));
}

void register_all() {
  const char* presets[] = {"llama7b-tp2pp2-r", "llama7b-tp4pp2vpp2", "gpt2-1024-mbs128-r",
                           "qwen-moe", "llama7b-varlen"};
  for (const char* p : presets) {
    for (PlanMode mode : {PlanMode::Alias, PlanMode::Windowed, PlanMode::Offset}) {
      const std::string name = std::string("plan/") + p + "/" + std::string(plan_mode_name(mode));
      benchmark::RegisterBenchmark(name.c_str(), plan_preset, std::string(p), mode,
                                   PlanOptions{}.remainder)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1);
    }
    for (RemainderPlacement r :
         {RemainderPlacement::Widened, RemainderPlacement::Aligned, RemainderPlacement::Auto}) {
      const std::string name =
          std::string("remainder/") + p + "/" + std::string(remainder_placement_name(r));
      benchmark::RegisterBenchmark(name.c_str(), plan_preset, std::string(p), PlanMode::Alias, r)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
