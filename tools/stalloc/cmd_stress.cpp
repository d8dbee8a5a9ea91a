// `stalloc stress`: the memory-pressure tester. For each allocator it finds, by bisection over
// capacities in steps of the granularity (sim/pressure_test.h), the smallest device capacity
// that runs the workload without an OOM. Besides the allocator models it can measure the
// runtime allocator itself ("stalloc-runtime"), replayed on the host backend with the capacity
// set through STALLOC_CONF, so the figure includes its profiling iterations and dynamic path.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "workload/generator.h"
#include "trace/trace_io.h"
#include "sim/allocator_model.h"
#include "sim/pressure_test.h"
#include "src/runtime.h"
#include "src/runtime_config.h"
#include "src/trace_replayer.h"
#include "tools/stalloc/command.h"

namespace stalloc::cli {

namespace {

constexpr const char* kRuntimeName = "stalloc-runtime";

constexpr const char* kUsage =
    "usage: stalloc stress TRACE | --preset NAME [--allocators LIST] [--granularity BYTES]\n"
    "                      [--pytorch-conf CONF] [--json]\n\n"
    "For each allocator, the smallest device capacity (a multiple of the granularity) at which\n"
    "the workload runs without running out of memory, found by bisection; its ratio to the\n"
    "lower bound (peak live bytes) and the number of replays it took.\n"
    "  TRACE               a trace file (text or binary)\n"
    "  --preset NAME       a generator preset (`stalloc gen --list` lists them)\n"
    "  --allocators LIST   comma-separated; the allocator models (default: all of them) and\n"
    "                      stalloc-runtime: the runtime allocator replayed on the host backend,\n"
    "                      capacity set in STALLOC_CONF (minutes per replay on the large presets:\n"
    "                      every chunk is a memfd mapping, so it is only run when named)\n"
    "  --granularity BYTES capacity step and chunk size (default 2MiB)\n"
    "  --pytorch-conf CONF PYTORCH_CUDA_ALLOC_CONF for the pytorch and gmlake models\n"
    "  --json              print {\"workload\", \"lower_bound_bytes\", \"results\": [...]}";

std::vector<std::string> known_allocators() {
  std::vector<std::string> names = allocator_model_names();
  names.emplace_back(kRuntimeName);
  return names;
}

std::vector<std::string> parse_allocators(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  if (out.empty()) throw UsageError("--allocators: expected a comma-separated list");
  const auto known = known_allocators();
  for (const auto& a : out) {
    if (std::find(known.begin(), known.end(), a) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw UsageError("--allocators: unknown allocator '" + a + "' (known: " + list + ")");
    }
  }
  return out;
}

// The runtime replays the trace from a fresh start each time (profiling included) on a host
// driver; its statistics give the peak reserved, a failed allocation is an OOM.
CapacityProbe runtime_capacity_probe(const Trace& trace, std::uint64_t granularity) {
  return [&trace, granularity](std::uint64_t capacity, std::uint64_t* peak_reserved) {
    const RuntimeConfig config = parse_runtime_config(
        "backend:host,auto_step:false,profile_iterations:1,granularity:" +
        std::to_string(granularity) + ",capacity:" + std::to_string(capacity));
    Runtime runtime(config);
    ReplayOptions options;
    options.backward_thread = false;
    const ReplayResult r = replay_trace(runtime, trace, options);
    *peak_reserved = runtime.stats().peak_reserved_bytes;
    return r.failed_allocations == 0;
  };
}

void print_table(const std::string& workload, const std::vector<PressureResult>& results) {
  std::printf("workload %s, lower bound %s\n", workload.c_str(),
              format_bytes(results.empty() ? 0 : results.front().lower_bound_bytes).c_str());
  std::printf("%-20s %16s %16s %10s %8s\n", "allocator", "min capacity", "unlimited peak",
              "ratio", "replays");
  for (const PressureResult& r : results) {
    const std::string capacity = r.found ? format_bytes(r.min_capacity_bytes) : "none";
    std::printf("%-20s %16s %16s %10.4f %8llu\n", r.allocator.c_str(), capacity.c_str(),
                format_bytes(r.unlimited_peak_reserved_bytes).c_str(), r.ratio_to_lower_bound,
                static_cast<unsigned long long>(r.replays));
  }
}

void print_json(const std::string& workload, std::uint64_t lower_bound,
                std::uint64_t granularity, const std::vector<PressureResult>& results) {
  JsonWriter j(std::cout);
  j.begin_object();
  j.field("workload", workload);
  j.field("lower_bound_bytes", lower_bound);
  j.field("granularity", granularity);
  j.key("results").begin_array();
  for (const PressureResult& r : results) {
    j.begin_object();
    j.field("allocator", r.allocator);
    j.field("found", r.found);
    j.field("min_capacity_bytes", r.min_capacity_bytes);
    j.field("ratio_to_lower_bound", r.ratio_to_lower_bound);
    j.field("unlimited_peak_reserved_bytes", r.unlimited_peak_reserved_bytes);
    j.field("replays", r.replays);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  std::cout << "\n";
}

int stress(const std::vector<std::string>& raw) {
  Args args(raw);
  std::string text;
  std::vector<std::string> allocators = allocator_model_names();
  if (args.option("--allocators", &text)) allocators = parse_allocators(text);
  std::uint64_t granularity = 2 * MiB;
  if (args.option("--granularity", &text)) {
    const auto g = parse_bytes(text);
    if (!g || *g == 0 || (*g & (*g - 1)) != 0 || *g % (4 * KiB) != 0) {
      throw UsageError("--granularity: expected a power of two, a multiple of 4KiB, got '" + text + "'");
    }
    granularity = *g;
  }
  ModelOptions model_options;
  model_options.granularity = granularity;
  args.option("--pytorch-conf", &model_options.pytorch_conf);
  const bool json = args.flag("--json");
  std::string preset_name;
  const bool has_preset = args.option("--preset", &preset_name);
  const std::vector<std::string> files = args.positionals();
  if (has_preset == !files.empty() || files.size() > 1) {
    throw UsageError("stress: give exactly one workload, a TRACE file or --preset NAME");
  }
  const std::string workload = has_preset ? preset_name : files.front();
  const Trace trace = has_preset ? generate_trace(preset(preset_name)) : read_trace(files.front());
  const std::string problem = validate_trace(trace);
  if (!problem.empty()) throw UsageError(workload + ": " + problem);
  const std::uint64_t lower_bound = lower_bound_bytes(trace);

  std::vector<PressureResult> results;
  for (const std::string& allocator : allocators) {
    const auto started = std::chrono::steady_clock::now();
    const CapacityProbe probe = allocator == kRuntimeName
                                    ? runtime_capacity_probe(trace, granularity)
                                    : model_capacity_probe(trace, allocator, model_options);
    results.push_back(find_min_capacity(allocator, lower_bound, granularity, probe));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::fprintf(stderr, "stress: %s: %llu replays in %.1f s\n", allocator.c_str(),
                 static_cast<unsigned long long>(results.back().replays), seconds);
  }
  if (json) {
    print_json(workload, lower_bound, granularity, results);
  } else {
    print_table(workload, results);
  }
  return 0;
}

}  // namespace

STALLOC_COMMAND(Command{"stress", "smallest capacity each allocator runs a workload in (bisection)",
                        kUsage, stress});

}  // namespace stalloc::cli
