#include "sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <unordered_map>

#include "common/error.h"
#include "workload/generator_random.h"

namespace stalloc {

namespace {

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

SimResult simulate_with(const Trace& trace, AllocatorModel& model, std::string_view workload,
                        std::size_t max_points) {
  const auto start = std::chrono::steady_clock::now();
  SimResult r;
  r.workload = std::string(workload);
  r.allocator = std::string(model.name());
  const auto& events = trace.events;
  const std::size_t n = events.size();
  // Each timeline point covers `bucket` events and keeps their highest values, so the plot
  // shows every peak however long the trace.
  const std::size_t points = std::max<std::size_t>(1, max_points);
  const std::size_t bucket = std::max<std::size_t>(1, (n + points - 1) / points);
  TimelinePoint pending;

  std::unordered_map<std::uint64_t, std::uint64_t> live;  // id -> size
  live.reserve(4096);
  std::uint64_t allocated = 0;
  const std::uint32_t first_iteration = n ? events.front().iteration : 0;
  std::uint32_t last_iteration = first_iteration;
  // Calls are tallied per iteration; the last one is the steady state, after whatever a policy
  // does while it warms up (caching, profiling, planning).
  vmm::CallTally calls_at_iteration_start;
  auto close_iteration = [&] {
    model.end_iteration(last_iteration);
    const vmm::CallTally now = model.driver_calls();
    r.iteration_calls.push_back(now - calls_at_iteration_start);
    calls_at_iteration_start = now;
  };

  for (std::size_t i = 0; i < n; ++i) {
    const Event& e = events[i];
    while (e.iteration > last_iteration) {
      close_iteration();
      ++last_iteration;
    }
    if (e.kind == EventKind::Alloc) {
      std::uint64_t address = 0;
      if (!model.allocate(e, &address)) {
        r.oom = true;
        r.oom_event = i;
        break;
      }
      live[e.id] = e.size;
      allocated += e.size;
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) continue;  // a free of something never allocated: not the model's
      allocated -= it->second;
      live.erase(it);
      model.deallocate(e);
    }
    const std::uint64_t reserved = model.reserved_bytes();
    if (reserved < allocated) {
      throw std::logic_error(std::string(model.name()) + " reserves " + std::to_string(reserved) +
                             " bytes while " + std::to_string(allocated) + " are live, at event " +
                             std::to_string(i));
    }
    r.peak_allocated_bytes = std::max(r.peak_allocated_bytes, allocated);
    r.peak_reserved_bytes = std::max(r.peak_reserved_bytes, reserved);
    pending.allocated = std::max(pending.allocated, allocated);
    pending.reserved = std::max(pending.reserved, reserved);
    r.events = i + 1;
    if ((i + 1) % bucket == 0) {
      pending.event = i;
      r.timeline.push_back(pending);
      pending = TimelinePoint{};
    }
  }
  if (r.events % bucket != 0) {  // r.events > 0 here
    pending.event = r.events - 1;
    r.timeline.push_back(pending);
  }
  close_iteration();
  r.driver_calls_per_iteration = static_cast<double>(r.iteration_calls.back().total());
  r.waste_bytes = r.peak_reserved_bytes - std::min(r.peak_reserved_bytes, r.peak_allocated_bytes);
  r.utilization = r.peak_reserved_bytes == 0
                      ? 1.0
                      : static_cast<double>(r.peak_allocated_bytes) / static_cast<double>(r.peak_reserved_bytes);
  r.milliseconds = elapsed_ms(start);
  return r;
}

SimResult simulate(const Trace& trace, std::string_view workload, std::string_view allocator,
                   const ModelOptions& options, std::size_t max_points) {
  const auto start = std::chrono::steady_clock::now();
  auto model = make_allocator_model(allocator, trace, options);
  SimResult r = simulate_with(trace, *model, workload, max_points);
  r.allocator = std::string(allocator);
  r.milliseconds = elapsed_ms(start);
  return r;
}

std::string_view sweep_parameter_name(SweepParameter p) {
  return p == SweepParameter::MicroBatch ? "mbs" : "seq";
}

bool parse_sweep_parameter(std::string_view s, SweepParameter* out) {
  if (s == "mbs") {
    *out = SweepParameter::MicroBatch;
  } else if (s == "seq") {
    *out = SweepParameter::SeqLen;
  } else {
    return false;
  }
  return true;
}

SweepResult sweep_largest(const GeneratorConfig& base, SweepParameter parameter, std::string_view allocator,
                          const ModelOptions& options) {
  if (options.capacity == 0) throw UsageError("a sweep needs a capacity");
  const bool mbs = parameter == SweepParameter::MicroBatch;
  const std::uint64_t unit = mbs ? 1 : 256;
  // Sequences up to 16M tokens: long-context presets with full recompute run 1M in 30 GiB.
  const std::uint64_t limit = mbs ? 4096 : (1ull << 24);
  std::vector<std::uint64_t> varying;  // the preset's per-iteration lengths, when they vary
  if (!mbs && (base.seq_max > 0 || !base.seq_list.empty())) varying = gen::iteration_sequence_lengths(base);
  const std::uint64_t microbatches = microbatches_per_iteration(base);
  SweepResult out;
  out.workload = base.name;
  out.allocator = std::string(allocator);
  out.parameter = parameter;

  // Whether the workload at `steps` units runs; records the best run.
  auto fits = [&](std::uint64_t steps) {
    GeneratorConfig cfg = base;
    if (mbs) {
      cfg.micro_batch = steps;
      cfg.global_batch = microbatches * steps * cfg.dp;
    } else if (!varying.empty()) {
      // Lengths that vary per iteration keep their order and proportions: the preset's own
      // lengths scaled so that the longest is the swept one.
      const std::uint64_t longest = steps * unit;
      const std::uint64_t granule = sequence_granule(base);
      const std::uint64_t base_longest = *std::max_element(varying.begin(), varying.end());
      cfg.seq_min = cfg.seq_max = 0;
      cfg.seq_list.clear();
      for (std::uint64_t s : varying) {
        cfg.seq_list.push_back(std::max(granule, s * longest / base_longest / granule * granule));
      }
    } else {
      cfg.seq_len = steps * unit;
      cfg.seq_min = cfg.seq_max = 0;
      cfg.seq_list.clear();
    }
    Trace trace;
    try {
      trace = generate_trace(cfg);
    } catch (const UsageError&) {
      return false;  // e.g. a sequence length the parallel layout cannot split
    }
    ++out.runs;
    SimResult r = simulate(trace, base.name, allocator, options, 1);
    if (r.oom) return false;
    if (steps * unit > out.largest) {
      out.largest = steps * unit;
      out.peak_reserved_bytes = r.peak_reserved_bytes;
    }
    return true;
  };

  std::uint64_t good = 0, bad = 0;
  for (std::uint64_t steps = 1; steps * unit <= limit; steps *= 2) {
    if (!fits(steps)) {
      bad = steps;
      break;
    }
    good = steps;
  }
  if (bad == 0) return out;  // fits up to the limit
  while (bad - good > 1) {
    const std::uint64_t mid = good + (bad - good) / 2;
    if (fits(mid)) {
      good = mid;
    } else {
      bad = mid;
    }
  }
  return out;
}

}  // namespace stalloc
