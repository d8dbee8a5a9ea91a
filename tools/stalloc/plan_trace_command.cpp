// `stalloc plan TRACE... -o PLAN`: physical-chunk plans for one trace per rank, planned in
// parallel (one thread per trace, at most one per core). Every plan is checked by the
// independent validator before it is written.
#include "tools/stalloc/plan_trace_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "planner/chunk/chunk_plan.h"
#include "planner/chunk/plan_validator.h"
#include "trace/trace_io.h"
#include "tools/stalloc/command.h"

namespace stalloc::cli {

namespace {

struct PlanJob {
  std::string trace_path;
  std::string plan_path;
  ChunkPlan plan;
  double milliseconds = 0;
  std::exception_ptr error;
};

std::uint32_t default_iteration(const Trace& trace) {
  for (const Event& e : trace.events) {
    if (e.iteration >= 1) return 1;
  }
  return 0;
}

void run_job(PlanJob& job, std::optional<std::uint32_t> iteration, const PlanOptions& options) {
  try {
    const Trace trace = read_trace(job.trace_path);
    const auto begin = std::chrono::steady_clock::now();
    job.plan = plan_iteration(trace, iteration.value_or(default_iteration(trace)), options);
    job.milliseconds =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    const PlanValidation check = validate_plan(job.plan);
    if (!check.ok) {
      throw std::logic_error("internal error: the plan for " + job.trace_path +
                             " fails validation: " + check.errors.front());
    }
    write_plan(job.plan, job.plan_path);
  } catch (...) {
    job.error = std::current_exception();
  }
}

void write_json(const std::vector<PlanJob>& jobs) {
  JsonWriter json(std::cout);
  if (jobs.size() > 1) json.begin_array();
  for (const PlanJob& job : jobs) {
    const ChunkPlan& p = job.plan;
    json.begin_object()
        .field("trace", job.trace_path)
        .field("plan", job.plan_path)
        .field("mode", plan_mode_name(p.mode))
        .field("iteration", p.iteration)
        .field("slots", static_cast<std::uint64_t>(p.slots.size()))
        .field("num_chunks", p.num_chunks)
        .field("lower_bound_bytes", p.lower_bound_bytes)
        .field("peak_reserved_bytes", p.num_chunks * p.granularity)
        .field("utilization", plan_utilization(p))
        .field("dynamic_peak_bytes", p.dynamic_peak_bytes)
        .field("mappings", p.mappings)
        .field("vmm_ops_per_iteration", p.vmm_ops_per_iteration)
        .field("remainder", remainder_placement_name(p.remainder))
        .field("milliseconds", job.milliseconds)
        .end_object();
  }
  if (jobs.size() > 1) json.end_array();
  std::cout << "\n";
}

void write_summary(const std::vector<PlanJob>& jobs) {
  for (const PlanJob& job : jobs) {
    const ChunkPlan& p = job.plan;
    std::printf("%s -> %s: %s plan of iteration %u, %llu chunks (%s) for a lower bound of %s, "
                "utilization %.2f%%, %llu mappings, %llu VMM calls per iteration, %.1f ms\n",
                job.trace_path.c_str(), job.plan_path.c_str(),
                std::string(plan_mode_name(p.mode)).c_str(), p.iteration,
                static_cast<unsigned long long>(p.num_chunks),
                format_bytes(p.num_chunks * p.granularity).c_str(),
                format_bytes(p.lower_bound_bytes).c_str(), 100.0 * plan_utilization(p),
                static_cast<unsigned long long>(p.mappings),
                static_cast<unsigned long long>(p.vmm_ops_per_iteration), job.milliseconds);
  }
}

}  // namespace

int plan_trace_command(const std::vector<std::string>& raw) {
  Args args(raw);
  std::string output, value;
  if (!args.option("--output", &output) && !args.option("-o", &output)) {
    throw UsageError("missing -o PLAN (where to write the plan)");
  }
  PlanOptions options;
  if (args.option("--mode", &value) && !parse_plan_mode(value, &options.mode)) {
    throw UsageError("--mode must be alias, windowed or offset, got '" + value + "'");
  }
  std::optional<std::uint32_t> iteration;
  if (args.option("--iteration", &value)) {
    auto k = parse_u64(value);
    if (!k || *k > UINT32_MAX) throw UsageError("--iteration needs an iteration number, got '" + value + "'");
    iteration = static_cast<std::uint32_t>(*k);
  }
  if (args.option("--granularity", &value)) {
    auto g = parse_bytes(value);
    if (!g || *g == 0) throw UsageError("--granularity needs a positive size, got '" + value + "'");
    options.granularity = *g;
  }
  if (args.option("--windows", &value)) {
    auto w = parse_u64(value);
    if (!w || *w == 0 || *w > UINT32_MAX) throw UsageError("--windows needs a positive count, got '" + value + "'");
    options.windows = static_cast<std::uint32_t>(*w);
  }
  if (args.option("--time-limit", &value)) {
    char* end = nullptr;
    const double seconds = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(seconds >= 0)) {
      throw UsageError("--time-limit needs seconds, got '" + value + "'");
    }
    options.dsa.time_limit_seconds = seconds;
  }
  if (args.option("--remainder", &value)) {
    if (value == "widened") {
      options.remainder = RemainderPlacement::Widened;
    } else if (value == "aligned") {
      options.remainder = RemainderPlacement::Aligned;
    } else if (value == "auto") {
      options.remainder = RemainderPlacement::Auto;
    } else {
      throw UsageError("--remainder must be widened, aligned or auto, got '" + value + "'");
    }
  }
  const bool json = args.flag("--json");
  const std::vector<std::string> traces = args.positionals();
  if (traces.empty()) throw UsageError("no trace given (stalloc plan TRACE... -o PLAN)");

  std::vector<PlanJob> jobs(traces.size());
  for (std::size_t i = 0; i < traces.size(); ++i) {
    jobs[i].trace_path = traces[i];
    jobs[i].plan_path = traces.size() == 1 ? output : output + ".rank" + std::to_string(i);
  }
  const std::size_t workers =
      std::max<std::size_t>(1, std::min<std::size_t>(jobs.size(), std::thread::hardware_concurrency()));
  for (std::size_t first = 0; first < jobs.size(); first += workers) {
    std::vector<std::thread> threads;
    for (std::size_t i = first; i < std::min(jobs.size(), first + workers); ++i) {
      threads.emplace_back(run_job, std::ref(jobs[i]), iteration, std::cref(options));
    }
    for (auto& t : threads) t.join();
  }
  for (const PlanJob& job : jobs) {
    if (job.error) std::rethrow_exception(job.error);
  }
  if (json) {
    write_json(jobs);
  } else {
    write_summary(jobs);
  }
  return 0;
}

}  // namespace stalloc::cli
