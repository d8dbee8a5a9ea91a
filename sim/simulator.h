// Replays a trace through an allocator model and measures what the design brief compares:
// peak allocated (the trace's lower bound unless the run stops early), peak reserved,
// utilization, waste, out-of-memory under a capacity, driver calls per steady-state iteration,
// and a downsampled timeline for plots.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "workload/generator.h"
#include "trace/trace.h"
#include "vmm/driver_cost.h"
#include "sim/allocator_model.h"

namespace stalloc {

struct TimelinePoint {
  std::uint64_t event = 0;      // index of the last event the point covers
  std::uint64_t allocated = 0;  // the highest values over the events the point covers
  std::uint64_t reserved = 0;
};

struct SimResult {
  std::string workload;
  std::string allocator;
  std::uint64_t events = 0;  // events replayed (all of them unless out of memory)
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  double utilization = 0.0;  // peak allocated / peak reserved (1 for an empty trace)
  std::uint64_t waste_bytes = 0;
  bool oom = false;
  std::uint64_t oom_event = 0;  // index of the allocation that failed, when oom
  // Driver calls made during the trace's last iteration (the steady state, after warm-up,
  // profiling and planning); the whole trace's when it has only one iteration.
  double driver_calls_per_iteration = 0.0;
  // Driver calls per kind in each iteration of the trace, in order (one entry per iteration
  // number from the first to the last seen); the last is the steady state.
  std::vector<vmm::CallTally> iteration_calls;
  // Filled by estimate_time (sim/time_estimate.h): the iteration's time on a GPU and what the
  // calls would cost on it.
  struct TimeEstimate {
    std::string gpu;
    double iteration_seconds = 0.0;  // 0 when unknown
    std::string iteration_source;    // "time stamps", "FLOPs at 40% MFU", "unknown"
    vmm::CallTally first_calls;      // the costliest iteration before the last (the last if alone)
    double allocator_seconds_first = 0.0;
    double allocator_seconds_steady = 0.0;
    double overhead_first = 0.0;     // of the iteration time; 0 when that is unknown
    double overhead_steady = 0.0;
    // A run of run_iterations iterations: the simulated iterations as they were, then the
    // steady (last) one for the rest (time_estimate.h).
    std::uint64_t run_iterations = 0;
    double allocator_seconds_run = 0.0;
    double overhead_run = 0.0;       // of run_iterations times the iteration time
    std::vector<double> allocator_seconds;  // per iteration, in the order of iteration_calls
  } time;
  // Not a model: what the recorded run's own allocator held (`stalloc sim`'s actual row).
  bool recorded = false;
  // Copies of the recorded trace's last iteration the simulated one ends with (run_extension.h).
  std::uint32_t repeated_iterations = 0;
  double milliseconds = 0.0;  // model construction (planning) and replay
  std::vector<TimelinePoint> timeline;
};

inline constexpr std::size_t kMaxTimelinePoints = 2000;

// Builds the model with make_allocator_model and replays the trace; stops at the first
// allocation the model cannot serve. Throws std::logic_error if the model ever reserves less
// than is live (a model bug, never hidden).
SimResult simulate(const Trace& trace, std::string_view workload, std::string_view allocator,
                   const ModelOptions& options, std::size_t max_points = kMaxTimelinePoints);

// The same with a model the caller built (its construction is not timed).
SimResult simulate_with(const Trace& trace, AllocatorModel& model, std::string_view workload,
                        std::size_t max_points = kMaxTimelinePoints);

// The largest micro-batch (or sequence length) of a generated workload that an allocator runs
// without running out of memory under a capacity.
enum class SweepParameter : std::uint8_t { MicroBatch, SeqLen };
std::string_view sweep_parameter_name(SweepParameter p);  // "mbs", "seq"
bool parse_sweep_parameter(std::string_view s, SweepParameter* out);

struct SweepResult {
  std::string workload;
  std::string allocator;
  SweepParameter parameter = SweepParameter::MicroBatch;
  std::uint64_t largest = 0;  // 0: not even the smallest value fits
  std::uint64_t peak_reserved_bytes = 0;  // at `largest`
  std::uint64_t runs = 0;  // simulations it took
};

// Doubles the parameter from its smallest value (micro-batch 1, sequence 256) until the run
// runs out of memory (or the configuration becomes invalid), then bisects between the last value
// that fit and the first that did not (sequence lengths in steps of 256). The number of
// micro-batches per iteration stays that of `base`; sequences go up to 16M tokens. A preset whose
// iterations vary their length (seq_min..seq_max, seq_list) keeps its lengths, order and
// proportions: they are scaled so that the longest is the swept value (each rounded down to the
// preset's sequence granule); every other preset runs one fixed length. options.capacity must be
// set.
SweepResult sweep_largest(const GeneratorConfig& base, SweepParameter parameter, std::string_view allocator,
                          const ModelOptions& options);

}  // namespace stalloc
