// `stalloc replay TRACE [--plan PLAN] [--backend host|cuda|auto] [--verify] [--conf CONF]
// [--gpu-lag N [--gpu-lag-seed S]] [--no-step] [--json]`: runs the real runtime allocator (src/runtime.h)
// through a trace's requests and reports what it reserved against the trace's lower bound.
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "planner/chunk/chunk_plan.h"
#include "trace/trace_io.h"
#include "src/runtime.h"
#include "src/trace_replayer.h"
#include "tools/stalloc/command.h"
#include "src/runtime_driver.h"
#include "vmm/host_driver.h"

namespace stalloc::cli {

namespace {

constexpr const char* kUsage =
    "usage: stalloc replay TRACE [--plan PLAN] [--backend host|cuda|auto] [--verify]\n"
    "                      [--conf STALLOC_CONF] [--json] [--snapshot OUT.pickle]\n"
    "                      [--save-trace OUT] [--gpu-lag N [--gpu-lag-seed S]] [--no-step]\n\n"
    "Runs the runtime allocator through the trace: a step() at each iteration boundary,\n"
    "backward requests (thread 1) from a second thread in the trace's order. Background\n"
    "planning is waited for at each boundary, so results are deterministic.\n"
    "  --plan PLAN     install this plan (stalloc plan) before the first request\n"
    "  --backend B     VMM backend (default host); overrides backend in --conf; cuda\n"
    "                  replays traces of one stream only\n"
    "  --verify        write a pattern into each allocation (first and last 64 bytes and 64\n"
    "                  bytes per MiB) and check it before the free; exit 1 on a mismatch\n"
    "  --conf CONF     STALLOC_CONF settings (docs/runtime.md); the STALLOC_CONF environment\n"
    "                  variable is not read here: give it with --conf \"$STALLOC_CONF\"\n"
    "  --json          machine-readable output\n"
    "  --snapshot OUT  write a PyTorch memory snapshot (pytorch.org/memory_viz) at the end\n"
    "  --save-trace OUT  write the trace the runtime recorded (profiled iterations)\n"
    "  --gpu-lag N     host backend: recorded events complete only after N queries, as\n"
    "                  GPU work still running (vmm/host_driver.h, HostLag); 0: none\n"
    "  --gpu-lag-seed S  each event draws its lag from [0, N] with this seed (default 0:\n"
    "                  every event takes N)\n"
    "  --no-step       never call step(): the runtime finds iteration boundaries itself\n"
    "                  (auto_step, docs/runtime.md), as for a program that never steps;\n"
    "                  per-iteration figures still follow the trace's iterations\n"
    "Exit status: 0; 1 when a pattern broke or memory was used unmapped or shared while GPU work\n"
    "could still use it; 3 when allocations failed (out of memory: a capacity in --conf, or the\n"
    "backend's limit). A malformed trace is refused before anything is allocated (exit 2).";

struct Summary {
  std::uint64_t lower_bound = 0;
  RuntimeStats stats;
  ReplayResult result;
  double utilization = 0;         // lower bound / peak reserved over the whole replay
  double steady_utilization = 0;  // peak allocated / peak reserved after the last plan install
  double vmm_ops_per_iteration = 0;
  // The median too: the mean carries the iterations that settle after an install.
  double vmm_ops_median = 0;
  std::uint64_t steady_iterations = 0;
  std::size_t first_steady = 0;
  double ns_per_malloc_median = 0;
  // Over the steady iterations: the profiling ones map a chunk per new page and dominate the
  // median of a short replay.
  double ns_per_malloc_median_steady = 0;
  vmm::HostLag lag;  // --gpu-lag
};

double median_of(std::vector<std::uint64_t> ns) {
  if (ns.empty()) return 0;
  std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(ns.size() / 2), ns.end());
  return static_cast<double>(ns[ns.size() / 2]);
}

// Steady state: the iterations after the last one that installed a plan.
void steady_state(Summary& s) {
  const auto& its = s.result.iterations;
  // After the last install (at the end of iteration i), iteration i + 1 is the first to follow
  // the plan and maps its views as it reaches them: the steady ones come after it.
  std::size_t first = 0;
  for (std::size_t i = 0; i < its.size(); ++i) {
    if (its[i].plans_installed > 0) first = i + 2;
  }
  if (first >= its.size()) first = its.empty() ? 0 : its.size() - 1;
  std::uint64_t calls = 0;
  std::vector<std::uint64_t> per_iteration;
  for (std::size_t i = first; i < its.size(); ++i) {
    calls += its[i].vmm_calls;
    per_iteration.push_back(its[i].vmm_calls);
  }
  s.steady_iterations = its.size() - first;
  s.first_steady = first;
  s.vmm_ops_per_iteration =
      s.steady_iterations == 0 ? 0.0 : static_cast<double>(calls) / static_cast<double>(s.steady_iterations);
  if (!per_iteration.empty()) {
    std::sort(per_iteration.begin(), per_iteration.end());
    const std::size_t n = per_iteration.size();
    s.vmm_ops_median = n % 2 == 1 ? static_cast<double>(per_iteration[n / 2])
                                  : (static_cast<double>(per_iteration[n / 2 - 1]) +
                                     static_cast<double>(per_iteration[n / 2])) / 2.0;
  }
}

void print_json(const Summary& s) {
  JsonWriter w(std::cout);
  w.begin_object();
  w.field("lower_bound_bytes", s.lower_bound);
  w.field("peak_reserved_bytes", s.result.peak_reserved_bytes);
  w.field("peak_allocated_bytes", s.result.peak_allocated_bytes);
  w.field("utilization", s.utilization);
  w.field("steady_peak_reserved_bytes", s.stats.peak_reserved_bytes);
  w.field("steady_peak_allocated_bytes", s.stats.peak_allocated_bytes);
  w.field("steady_utilization", s.steady_utilization);
  w.field("matched", s.stats.matches);
  w.field("mismatched", s.stats.misses + s.stats.conflicts);
  w.field("conflicts", s.stats.conflicts);
  w.field("unplanned", s.stats.unplanned);
  w.field("plan_installs", s.stats.plan_installs);
  w.field("iterations", static_cast<std::uint64_t>(s.result.iterations.size()));
  w.field("steady_iterations", s.steady_iterations);
  w.field("vmm_ops_per_iteration", s.vmm_ops_per_iteration);
  w.field("vmm_ops_median_per_iteration", s.vmm_ops_median);
  w.field("peak_live_mappings", s.stats.driver.peak_live_mappings);
  w.field("verify_errors", s.result.verify_errors);
  w.field("failed_allocations", s.result.failed_allocations);
  w.field("unguarded_uses", s.stats.driver.unguarded_uses);
  w.field("unmapped_uses", s.result.unmapped_uses);
  w.field("ooms", s.stats.ooms);
  w.field("stream_waits", s.stats.stream_waits);
  w.field("stream_waits_on_marks", s.stats.stream_waits_on_marks);
  w.field("plan_failures", s.stats.plan_failures);
  w.field("plans_declined", s.stats.plans_declined);
  w.field("plans_deferred", s.stats.plans_deferred);
  w.field("install_waits", s.stats.install_waits);
  w.field("runs_split", s.stats.runs_split);
  w.field("split_waits", s.stats.split_waits);
  w.field("dedicated_behind_gpu", s.stats.dedicated_behind_gpu);
  w.field("last_plan_error", s.stats.last_plan_error);
  w.field("ns_per_malloc_median", s.ns_per_malloc_median);
  w.field("ns_per_malloc_median_steady", s.ns_per_malloc_median_steady);
  w.field("gpu_lag", static_cast<std::uint64_t>(s.lag.queries));
  w.field("gpu_lag_seed", s.lag.seed);
  w.key("per_iteration").begin_array();
  for (const IterationReport& it : s.result.iterations) {
    w.begin_object()
        .field("matched", it.matches)
        .field("misses", it.misses)
        .field("conflicts", it.conflicts)
        .field("vmm_ops", it.vmm_calls)
        .field("creates", it.creates)
        .field("event_calls", it.event_calls)
        .field("plans_installed", it.plans_installed)
        .end_object();
  }
  w.end_array();
  w.end_object();
  std::cout << "\n";
}

void print_text(const Summary& s) {
  std::printf("lower bound      %s\n", format_bytes(s.lower_bound).c_str());
  std::printf("peak reserved    %s (steady state %s)\n",
              format_bytes(s.result.peak_reserved_bytes).c_str(),
              format_bytes(s.stats.peak_reserved_bytes).c_str());
  std::printf("peak allocated   %s (steady state %s)\n",
              format_bytes(s.result.peak_allocated_bytes).c_str(),
              format_bytes(s.stats.peak_allocated_bytes).c_str());
  std::printf("utilization      %.2f%% (steady state %.2f%%)\n", 100.0 * s.utilization,
              100.0 * s.steady_utilization);
  std::printf("matched          %llu\n", static_cast<unsigned long long>(s.stats.matches));
  std::printf("mismatched       %llu\n",
              static_cast<unsigned long long>(s.stats.misses + s.stats.conflicts));
  std::printf("plan installs    %llu\n", static_cast<unsigned long long>(s.stats.plan_installs));
  if (s.stats.plans_declined + s.stats.plans_deferred > 0) {
    std::printf("plans declined   %llu, deferred %llu: the last %s\n",
                static_cast<unsigned long long>(s.stats.plans_declined),
                static_cast<unsigned long long>(s.stats.plans_deferred),
                s.stats.last_plan_declined.c_str());
  }
  if (s.stats.plan_installs > 0) {
    std::printf("vmm ops/iter     %.1f mean, %.1f median (steady state: %llu iterations from iteration "
                "%zu, after the first to follow the last plan installed)\n",
                s.vmm_ops_per_iteration, s.vmm_ops_median,
                static_cast<unsigned long long>(s.steady_iterations), s.first_steady);
  } else {
    std::printf("vmm ops/iter     %.1f mean, %.1f median (every iteration: no plan installed, all "
                "served online)\n",
                s.vmm_ops_per_iteration, s.vmm_ops_median);
  }
  std::printf("live mappings    %llu at most\n",
              static_cast<unsigned long long>(s.stats.driver.peak_live_mappings));
  std::printf("verify errors    %llu\n", static_cast<unsigned long long>(s.result.verify_errors));
  std::printf("failed allocs    %llu\n",
              static_cast<unsigned long long>(s.result.failed_allocations));
  if (s.lag.queries > 0) {
    std::printf("unguarded uses   %llu (GPU work not ordered before an unmap or another stream)\n",
                static_cast<unsigned long long>(s.stats.driver.unguarded_uses));
    std::printf("unmapped uses    %llu\n", static_cast<unsigned long long>(s.result.unmapped_uses));
  }
  std::printf("malloc median    %.0f ns (steady state %.0f ns)\n", s.ns_per_malloc_median,
              s.ns_per_malloc_median_steady);
  if (!s.stats.last_plan_error.empty()) {
    std::printf("last plan error  %s\n", s.stats.last_plan_error.c_str());
  }
  if (!s.stats.last_oom.reason.empty()) {
    std::printf("last OOM         %s for %s\n", s.stats.last_oom.reason.c_str(),
                format_bytes(s.stats.last_oom.requested_bytes).c_str());
  }
}

int run_replay(const std::vector<std::string>& raw) {
  Args args(raw);
  const bool json = args.flag("--json");
  const bool verify = args.flag("--verify");
  const bool no_step = args.flag("--no-step");
  std::string plan_path, backend = "host", conf;
  const bool have_plan = args.option("--plan", &plan_path);
  const bool have_backend = args.option("--backend", &backend);
  args.option("--conf", &conf);
  std::string snapshot_path, saved_trace_path;
  const bool snapshot = args.option("--snapshot", &snapshot_path);
  const bool save = args.option("--save-trace", &saved_trace_path);
  vmm::HostLag lag;
  std::string text;
  const bool have_lag = args.option("--gpu-lag", &text);
  if (have_lag) {
    const auto n = parse_u64(text);
    if (!n || *n > UINT32_MAX) throw UsageError("--gpu-lag: expected a number of queries, got '" + text + "'");
    lag.queries = static_cast<std::uint32_t>(*n);
  }
  if (args.option("--gpu-lag-seed", &text)) {
    const auto seed = parse_u64(text);
    if (!seed) throw UsageError("--gpu-lag-seed: expected a non-negative integer, got '" + text + "'");
    if (!have_lag) throw UsageError("--gpu-lag-seed needs --gpu-lag");
    lag.seed = *seed;
  }
  const std::vector<std::string> pos = args.positionals();
  if (pos.size() != 1) throw UsageError("expected one TRACE\n" + std::string(kUsage));

  RuntimeConfig config = parse_runtime_config(conf);
  if (have_backend || conf.find("backend") == std::string::npos) config.backend = backend;
  // The trace knows its iteration boundaries and the replay steps at each: detection would only
  // add boundaries of its own before the first step.
  if (conf.find("auto_step") == std::string::npos) config.auto_step = no_step;
  if (no_step && !config.auto_step) {
    throw UsageError("--no-step with auto_step:false: nothing would ever end an iteration");
  }

  const Trace trace = read_trace(pos[0]);
  if (std::string problem = validate_trace(trace); !problem.empty()) {
    throw UsageError(pos[0] + ": malformed trace: " + problem);
  }
  // The runtime's own driver, unless events must lag: then a host driver made here with the lag
  // (RuntimeConfig has no key for it), as Runtime(config, device) would make it otherwise.
  std::unique_ptr<vmm::Driver> lagging;
  if (have_lag) {
    if (config.backend != "host") {
      throw UsageError("--gpu-lag emulates GPU lag on the host backend: use --backend host (not " +
                       config.backend + ")");
    }
    lagging = make_runtime_driver(config, 0, lag);
  }
  std::unique_ptr<Runtime> owned =
      lagging ? std::make_unique<Runtime>(config, *lagging) : std::make_unique<Runtime>(config);
  Runtime& runtime = *owned;
  // A trace names streams by index. The host backend takes the index for the handle; on a GPU,
  // index 0 is the default stream and every other index a stream made here (1 and 2 would be
  // CUDA's legacy and per-thread default streams, 3 and up garbage). They are not destroyed:
  // the runtime records on them until its driver goes with it, and the process ends then.
  std::vector<vmm::StreamHandle> streams;
  if (runtime.driver().name() != "host") {
    std::uint32_t last = 0;
    for (const Event& e : trace.events) last = std::max(last, e.stream);
    streams.assign(std::size_t{last} + 1, 0);
    for (std::uint32_t i = 1; i <= last; ++i) {
      const vmm::Status made = runtime.driver().stream_create(&streams[i]);
      if (made != vmm::Status::Success) {
        throw UsageError(pos[0] + ": cannot make stream " + std::to_string(i) + " of " +
                         std::to_string(last + 1) + " on the " +
                         std::string(runtime.driver().name()) + " backend (" +
                         std::string(vmm::status_name(made)) + ")");
      }
    }
  }
  if (have_plan) {
    ChunkPlan plan = read_plan(plan_path);
    require_plan_matches(plan, signature_of(trace, plan.iteration));
    runtime.add_plan(std::move(plan));
  }
  ReplayOptions options;
  options.verify = verify;
  options.time_mallocs = true;
  options.step = !no_step;
  options.streams = streams;
  Summary s;
  s.lag = lag;
  s.result = replay_trace(runtime, trace, options);
  s.stats = runtime.stats();
  if (snapshot) runtime.save_snapshot(snapshot_path);
  if (save) runtime.save_trace(saved_trace_path);
  s.lower_bound = lower_bound_bytes(trace);
  // With allocations failed the trace's peak was never live: what was, against what was held.
  const std::uint64_t peak_live =
      s.result.failed_allocations > 0 ? s.result.peak_allocated_bytes : s.lower_bound;
  auto ratio = [&](std::uint64_t reserved) {
    return reserved == 0 ? 1.0 : static_cast<double>(peak_live) / static_cast<double>(reserved);
  };
  s.utilization = ratio(s.result.peak_reserved_bytes);
  s.steady_utilization = s.stats.peak_reserved_bytes == 0
                             ? 1.0
                             : static_cast<double>(s.stats.peak_allocated_bytes) /
                                   static_cast<double>(s.stats.peak_reserved_bytes);
  steady_state(s);
  const std::vector<std::uint64_t>& ns = s.result.malloc_ns;
  s.ns_per_malloc_median = median_of(ns);
  if (s.first_steady < s.result.iterations.size()) {
    const std::size_t from = s.result.iterations[s.first_steady].first_malloc;
    s.ns_per_malloc_median_steady = median_of(
        std::vector<std::uint64_t>(ns.begin() + static_cast<std::ptrdiff_t>(from), ns.end()));
  }
  if (json) {
    print_json(s);
  } else {
    print_text(s);
  }
  const bool sound = s.result.verify_errors == 0 && s.stats.driver.unguarded_uses == 0 &&
                     s.result.unmapped_uses == 0;
  if (!sound) return 1;
  if (s.result.failed_allocations > 0) {
    std::fprintf(stderr, "stalloc replay: %llu allocations failed (%s)\n",
                 static_cast<unsigned long long>(s.result.failed_allocations),
                 s.stats.last_oom.reason.c_str());
    return 3;
  }
  return 0;
}

}  // namespace

STALLOC_COMMAND(Command{"replay", "run the runtime allocator through a trace and measure it",
                        kUsage, run_replay});

}  // namespace stalloc::cli
