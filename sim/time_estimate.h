// Time beside bytes: how long one iteration of a workload takes on a GPU, and how much of it an
// allocator's driver calls would cost (docs/driver_costs.md, docs/workloads.md "Iteration time").
//
// Without a GPU both are estimates: an iteration's time comes from the trace's own time stamps
// (imported real runs) or from the generator's FLOPs at a stated model-FLOPs utilisation; the
// allocator's time is its calls per kind priced by a vmm::CostTable. Every allocator is priced
// the same way, so the columns compare policies even where the absolute figures are off.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trace/trace.h"
#include "sim/simulator.h"
#include "vmm/driver_cost.h"

namespace stalloc {

// Dense bf16 peak of a GPU, for the FLOPs model.
struct GpuSpec {
  std::string_view name;  // "a100", "h100": the names of the cost tables
  double peak_flops = 0.0;
};
// nullptr for a GPU with no entry.
const GpuSpec* find_gpu_spec(std::string_view name);

// Model-FLOPs utilisation assumed for generated workloads: large dense training reaches 40-55%
// on A100/H100 (Megatron-LM, MegaScale); the lower end makes iterations shorter and the
// allocator's share larger.
inline constexpr double kAssumedMfu = 0.40;

struct IterationTime {
  double seconds = 0.0;  // 0 when unknown
  std::string source;    // "time stamps", "FLOPs at 40% MFU", or "unknown"
};

// From the time stamps when the trace has them (the median span from an iteration's first event
// to the next one's; the whole trace's span when it is one iteration), else from its
// "flops_per_iteration" meta entry on `gpu`.
IterationTime iteration_time(const Trace& trace, const GpuSpec& gpu);

// Iterations of the run `stalloc sim` prices by default.
inline constexpr std::uint64_t kDefaultRunIterations = 1000;

// Fills result.time: the iteration time of `trace` on `gpu` and the result's calls priced by
// `costs` (first: the costliest iteration before the last; steady: the last), and those of a
// run of `run_iterations`: the first min(run_iterations, simulated) iterations as simulated, each
// later one at the steady iteration's cost; its share is of run_iterations iterations' time.
void estimate_time(const Trace& trace, const GpuSpec& gpu, const vmm::CostTable& costs,
                   SimResult* result, std::uint64_t run_iterations = kDefaultRunIterations);

}  // namespace stalloc
