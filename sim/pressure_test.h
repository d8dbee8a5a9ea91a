// The memory-pressure tester behind `stalloc stress`: the smallest device capacity at which an
// allocator serves a whole workload without running out of memory, found by bisection over
// capacities that are multiples of a step (the granularity). Any allocator can be measured
// through a probe that replays the workload under a capacity: the allocator models here, the
// runtime allocator in the command (the planner does not depend on the runtime).
//
// Bisection assumes that more capacity never causes an OOM. The search starts from the highest
// capacity that is surely too small (below the lower bound) and the unlimited run's peak
// reserved (rounded up to the step), which fits unless the policy behaves differently under
// pressure; in that case the upper end is doubled until a run fits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "trace/trace.h"
#include "sim/allocator_model.h"

namespace stalloc {

// Replays the workload with `capacity` bytes of device memory (0: unlimited). Returns true when
// no allocation failed; *peak_reserved receives the run's peak reserved bytes.
using CapacityProbe = std::function<bool(std::uint64_t capacity, std::uint64_t* peak_reserved)>;

struct PressureResult {
  std::string allocator;
  std::uint64_t lower_bound_bytes = 0;
  std::uint64_t unlimited_peak_reserved_bytes = 0;  // without a capacity
  std::uint64_t min_capacity_bytes = 0;             // smallest multiple of the step that fits
  double ratio_to_lower_bound = 1.0;                // min capacity / lower bound (1: empty trace)
  std::uint64_t replays = 0;                        // probe calls, the unlimited run included
  bool found = false;  // false: not even 64 x the unlimited peak fitted
};

// Throws UsageError when step is 0.
PressureResult find_min_capacity(std::string_view allocator, std::uint64_t lower_bound,
                                 std::uint64_t step, const CapacityProbe& probe);

// A probe over an allocator model (make_allocator_model name) with base options (their
// capacity is replaced by the probed one).
CapacityProbe model_capacity_probe(const Trace& trace, std::string_view allocator,
                                   const ModelOptions& base);

}  // namespace stalloc
