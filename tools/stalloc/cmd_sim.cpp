// `stalloc sim`: replays workloads (trace files or generated presets) through the allocator
// models and compares what each reserves; optionally sweeps the largest micro-batch or sequence
// length that fits a capacity, and writes an HTML report. Runs are independent, so they go to a
// small pool of threads; traces are loaded once and shared read-only.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "workload/generator.h"
#include "trace/import_pytorch.h"
#include "trace/trace_io.h"
#include "sim/allocator_model.h"
#include "sim/report_html.h"
#include "sim/run_extension.h"
#include "sim/simulator.h"
#include "sim/time_estimate.h"
#include "tools/stalloc/command.h"

namespace stalloc::cli {

namespace {

constexpr const char* kUsage =
    "usage: stalloc sim [TRACE... | --preset NAME... | --suite default|real] [--capacity BYTES]\n"
    "                   [--granularity BYTES] [--allocators LIST] [--pytorch-conf CONF]\n"
    "                   [--stalloc-conf CONF] [--gpu a100|h100|h200] [--json] [--report DIR]\n"
    "                   [--sweep mbs|seq --capacity BYTES] [--gpu-lag N] [--jobs N]\n"
    "                   [--run-iterations N] [--repeat N]\n\n"
    "Replays each workload through each allocator model and prints peak allocated, peak reserved,\n"
    "utilization (peak allocated / peak reserved), waste, OOM under --capacity, driver calls in the\n"
    "costliest warm-up iteration and in the steady (last) one, and what those calls would cost on\n"
    "the GPU (an estimate from the cost table in docs/driver_costs.md) as a share of the iteration\n"
    "(time stamps of a real trace, or FLOPs at 40% MFU for a preset), and over a whole run. The\n"
    "stalloc rows run the runtime itself (src/) on a driver that keeps the books but holds no\n"
    "memory. Each workload runs long enough to reach its steady state: its last iteration is\n"
    "repeated (a one-iteration snapshot is one training or inference step; the blocks live at its\n"
    "start are allocated once; docs/driver_costs.md, \"The cost of a run\").\n"
    "  TRACE               a trace file (text or binary), or a PyTorch memory snapshot\n"
    "                      (torch.cuda.memory._dump_snapshot: one workload per device)\n"
    "  --preset NAME       a generator preset (repeatable; `stalloc gen --list` lists them)\n"
    "  --suite default     every preset except tiny (also what runs when no workload is given)\n"
    "  --suite real        the libtorch captures in tests/data/real and the real GPU snapshots in\n"
    "                      tests/data/snapshots, imported (found from the binary or the current\n"
    "                      directory)\n"
    "  --capacity BYTES    device memory (e.g. 80GiB); default unlimited\n"
    "  --granularity BYTES chunk size of the VMM-based models (default 2MiB)\n"
    "  --allocators LIST   comma-separated models; default all of them\n"
    "  --pytorch-conf CONF PYTORCH_CUDA_ALLOC_CONF for the pytorch and gmlake models\n"
    "  --stalloc-conf CONF STALLOC_CONF for the stalloc rows (the runtime), e.g. granularity:32MiB\n"
    "                      (the STALLOC_CONF environment variable is not read)\n"
    "  --gpu-lag N         the stalloc rows' events complete only after N queries, as on a GPU\n"
    "                      running behind the host (default 0: at once); the PyTorch models reuse\n"
    "                      memory in stream order and wait for no event\n"
    "  --gpu NAME          the cost table and peak FLOPs: a100 (default), h100, or h200\n"
    "                      (h200: VMM costs measured on one, docs/results/2026-12-04-h200.md)\n"
    "  --json              print {\"results\": [...], \"sweep\": [...] or null, \"gpu_lag\": N}\n"
    "                      instead of the table\n"
    "  --report DIR        write DIR/index.html with the table, the sweep and plots\n"
    "  --sweep mbs|seq     for each preset and allocator, the largest micro-batch or sequence\n"
    "                      length that runs without OOM under --capacity\n"
    "  --jobs N            runs in parallel (default: the number of cores)\n"
    "  --run-iterations N  the run that est. run prices: the simulated iterations, then the\n"
    "                      steady one for the rest (default 1000)\n"
    "  --repeat N          copies of the last iteration appended before measuring (default:\n"
    "                      enough for 8 iterations in all, at least 4; 0: the trace as recorded)";

struct Workload {
  std::string name;
  std::function<Trace()> load;
  bool generated = false;
  GeneratorConfig config;  // when generated
  // Loaded on first use by whichever run needs it, then shared.
  std::once_flag once;
  Trace trace;
  std::string error;
  std::uint32_t repeated = 0;  // copies of the last iteration appended (sim/run_extension.h)
};

std::string trace_stem(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* ext : {".traceb", ".trace"}) {
    const std::string e = ext;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      return name.substr(0, name.size() - e.size());
    }
  }
  return name;
}

// tests/data/<name>, found from the binary or the current directory.
std::filesystem::path data_dir(const std::string& name) {
  std::vector<std::filesystem::path> dirs;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path() / ".." / ".." / "tests" / "data" / name);
  dirs.push_back(std::filesystem::current_path() / "tests" / "data" / name);
  for (const auto& dir : dirs) {
    if (std::filesystem::is_directory(dir, ec)) return dir;
  }
  std::string looked;
  for (const auto& dir : dirs) looked += (looked.empty() ? "" : " and ") + dir.lexically_normal().string();
  throw UsageError("--suite real: no directory " + looked);
}

// The files of `dir` whose name contains `part`, sorted.
std::vector<std::string> files_in(const std::filesystem::path& dir, const std::string& part) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.find(part) != std::string::npos) found.push_back(entry.path().string());
  }
  std::sort(found.begin(), found.end());
  if (found.empty()) throw UsageError("--suite real: no *" + part + "* files in " + dir.string());
  return found;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

const Trace& trace_of(Workload& w) {
  std::call_once(w.once, [&w] {
    try {
      w.trace = w.load();
    } catch (const std::exception& e) {
      w.error = e.what();
    }
  });
  if (!w.error.empty()) throw UsageError(w.name + ": " + w.error);
  return w.trace;
}

// Runs task(i) for i in [0, n) on `jobs` threads; the first exception is rethrown.
void parallel_for(std::size_t n, unsigned jobs, const std::function<void(std::size_t)>& task) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        task(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = n;
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned count = static_cast<unsigned>(std::min<std::size_t>(std::max(1u, jobs), std::max<std::size_t>(1, n)));
  for (unsigned t = 1; t < count; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

// "12.3ms 4.5%": estimated seconds and their share of the iteration ("?" when it is unknown).
std::string time_cell(double seconds, double share, double iteration_seconds) {
  char buffer[48];
  if (iteration_seconds > 0.0) {
    std::snprintf(buffer, sizeof buffer, "%.1fms %.1f%%", seconds * 1e3, share * 100.0);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1fms ?", seconds * 1e3);
  }
  return buffer;
}

std::string oom_cell(const SimResult& r, std::uint64_t capacity) {
  if (r.oom) return "at event " + std::to_string(r.oom_event);
  return capacity ? "no" : "-";
}

// "1.23s 0.04%": a run's estimated seconds and their share of the run's time.
std::string run_cell(const SimResult::TimeEstimate& t) {
  char buffer[48];
  if (t.iteration_seconds > 0.0) {
    std::snprintf(buffer, sizeof buffer, "%.2fs %.2f%%", t.allocator_seconds_run, t.overhead_run * 100.0);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2fs ?", t.allocator_seconds_run);
  }
  return buffer;
}

// Columns as wide as their widest cell, so that long workload names and percentages of 1000% or
// more keep the table aligned.
void print_table(const std::vector<SimResult>& results, std::uint64_t capacity) {
  struct Cells {
    std::vector<std::string> text;
  };
  const std::vector<std::string> header = {"workload", "allocator", "peak alloc", "peak reserved", "util",
                                           "waste", "OOM", "calls 1st", "calls/it", "est. first",
                                           "est. steady", "est. run", "sim"};
  std::vector<Cells> rows;
  for (const SimResult& r : results) {
    const SimResult::TimeEstimate& t = r.time;
    char util[32], sim_ms[32], calls[32];
    std::snprintf(util, sizeof util, "%.1f%%", r.utilization * 100.0);
    std::snprintf(sim_ms, sizeof sim_ms, "%.0fms", r.milliseconds);
    std::snprintf(calls, sizeof calls, "%.0f", r.driver_calls_per_iteration);
    if (r.recorded) {
      rows.push_back({{r.workload, r.allocator, format_bytes(r.peak_allocated_bytes),
                       format_bytes(r.peak_reserved_bytes), util, format_bytes(r.waste_bytes), "-", "-", "-",
                       "-", "-", "-", "-"}});
      continue;
    }
    rows.push_back({{r.workload, r.allocator, format_bytes(r.peak_allocated_bytes),
                     format_bytes(r.peak_reserved_bytes), util, format_bytes(r.waste_bytes),
                     oom_cell(r, capacity), std::to_string(t.first_calls.total()), calls,
                     time_cell(t.allocator_seconds_first, t.overhead_first, t.iteration_seconds),
                     time_cell(t.allocator_seconds_steady, t.overhead_steady, t.iteration_seconds),
                     run_cell(t), sim_ms}});
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const Cells& row : rows) {
    for (std::size_t c = 0; c < header.size(); ++c) width[c] = std::max(width[c], row.text[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    for (std::size_t c = 0; c < cells.size(); ++c) {
      // The names left-aligned, the figures right-aligned.
      const int w = static_cast<int>(width[c]);
      std::printf(c < 2 ? "%-*s" : " %*s", w, cells[c].c_str());
      if (c == 0) std::printf(" ");
    }
    std::printf("\n");
  };
  print_row(header);
  for (const Cells& row : rows) print_row(row.text);
}

void print_iteration_times(const std::vector<SimResult>& results) {
  std::printf("\niteration time (%s): ", results.empty() ? "" : results.front().time.gpu.c_str());
  std::string last;
  for (const SimResult& r : results) {
    if (r.workload == last) continue;
    std::printf("%s%s %.3g s (%s)", last.empty() ? "" : "; ", r.workload.c_str(), r.time.iteration_seconds,
                r.time.iteration_source.c_str());
    last = r.workload;
  }
  std::printf("\nactual = what the recorded run's allocator held at its peak (the snapshot's segments); "
              "its driver calls are not recorded\n");
  std::printf("est. = estimated allocator driver time from the cost table (docs/driver_costs.md), no GPU measured;"
              " run = %llu iterations: the simulated ones (the last iteration repeated to reach the steady"
              " state), then the steady one for the rest\n",
              static_cast<unsigned long long>(results.empty() ? 0 : results.front().time.run_iterations));
}

// {kind: calls} of the kinds called at least once.
void write_call_object(JsonWriter& j, const vmm::CallTally& calls) {
  j.begin_object();
  for (std::size_t k = 0; k < vmm::kCallKinds; ++k) {
    if (calls.calls[k] != 0) j.field(vmm::call_kind_name(static_cast<vmm::CallKind>(k)), calls.calls[k]);
  }
  j.end_object();
}

void write_calls(JsonWriter& j, std::string_view key, const vmm::CallTally& calls) {
  j.key(key);
  write_call_object(j, calls);
}

void print_sweep(const std::vector<SweepResult>& sweep, std::uint64_t capacity) {
  std::printf("\nlargest configuration without OOM under %s:\n", format_bytes(capacity).c_str());
  std::printf("%-22s %-18s %6s %10s %14s %6s\n", "workload", "allocator", "param", "largest", "peak reserved", "runs");
  for (const SweepResult& s : sweep) {
    std::printf("%-22s %-18s %6s %10s %14s %6llu\n", s.workload.c_str(), s.allocator.c_str(),
                std::string(sweep_parameter_name(s.parameter)).c_str(),
                s.largest ? std::to_string(s.largest).c_str() : "none", format_bytes(s.peak_reserved_bytes).c_str(),
                static_cast<unsigned long long>(s.runs));
  }
}

void print_json(const std::vector<SimResult>& results, const std::vector<SweepResult>& sweep, bool swept,
                std::uint32_t gpu_lag) {
  JsonWriter j(std::cout);
  j.begin_object().key("results").begin_array();
  for (const SimResult& r : results) {
    j.begin_object()
        .field("workload", r.workload)
        .field("allocator", r.allocator)
        .field("peak_allocated_bytes", r.peak_allocated_bytes)
        .field("peak_reserved_bytes", r.peak_reserved_bytes)
        .field("utilization", r.utilization)
        .field("oom", r.oom);
    j.key("oom_event");
    if (r.oom) {
      j.value(r.oom_event);
    } else {
      j.null();
    }
    const SimResult::TimeEstimate& t = r.time;
    j.field("waste_bytes", r.waste_bytes).field("driver_calls_per_iteration", r.driver_calls_per_iteration);
    write_calls(j, "driver_calls", r.iteration_calls.empty() ? vmm::CallTally{} : r.iteration_calls.back());
    write_calls(j, "driver_calls_first", t.first_calls);
    j.field("gpu", t.gpu)
        .field("iteration_seconds", t.iteration_seconds)
        .field("iteration_time_source", t.iteration_source)
        .field("est_allocator_seconds_first", t.allocator_seconds_first)
        .field("est_allocator_seconds_steady", t.allocator_seconds_steady)
        .field("est_overhead_first", t.overhead_first)
        .field("est_overhead_steady", t.overhead_steady)
        .field("run_iterations", t.run_iterations)
        .field("est_allocator_seconds_run", t.allocator_seconds_run)
        .field("est_overhead_run", t.overhead_run)
        .field("iterations", static_cast<std::uint64_t>(r.iteration_calls.size()))
        .field("recorded", r.recorded)
        .field("repeated_iterations", static_cast<std::uint64_t>(r.repeated_iterations));
    j.key("est_allocator_seconds_per_iteration").begin_array();
    for (double seconds : t.allocator_seconds) j.value(seconds);
    j.end_array();
    j.key("driver_calls_per_iteration_by_kind").begin_array();
    for (const vmm::CallTally& calls : r.iteration_calls) write_call_object(j, calls);
    j.end_array()
        .field("milliseconds", r.milliseconds)
        .end_object();
  }
  j.end_array().key("sweep");
  if (!swept) {
    j.null();
  } else {
    j.begin_array();
    for (const SweepResult& s : sweep) {
      j.begin_object()
          .field("workload", s.workload)
          .field("allocator", s.allocator)
          .field("parameter", sweep_parameter_name(s.parameter))
          .field("largest", s.largest)
          .field("peak_reserved_bytes", s.peak_reserved_bytes)
          .field("runs", s.runs)
          .end_object();
    }
    j.end_array();
  }
  j.field("gpu_lag", static_cast<std::uint64_t>(gpu_lag));
  j.end_object();
  std::cout << "\n";
}

int sim(const std::vector<std::string>& raw) {
  const auto started = std::chrono::steady_clock::now();
  Args args(raw);
  std::string text;
  ModelOptions options;
  if (args.option("--capacity", &text)) {
    const auto capacity = parse_bytes(text);
    if (!capacity || *capacity == 0) throw UsageError("--capacity: expected a byte count above 0, got '" + text + "'");
    options.capacity = *capacity;
  }
  if (args.option("--granularity", &text)) {
    const auto g = parse_bytes(text);
    if (!g || *g == 0 || *g % 512 != 0) {
      throw UsageError("--granularity: expected a byte count that is a positive multiple of 512, got '" + text + "'");
    }
    options.granularity = *g;
  }
  args.option("--pytorch-conf", &options.pytorch_conf);
  args.option("--stalloc-conf", &options.stalloc_conf);
  if (args.option("--gpu-lag", &text)) {
    const auto n = parse_u64(text);
    if (!n || *n > 1000) throw UsageError("--gpu-lag: expected a number of queries from 0 to 1000, got '" + text + "'");
    options.gpu_lag = static_cast<std::uint32_t>(*n);
  }
  std::string gpu_name = "a100";
  args.option("--gpu", &gpu_name);
  const GpuSpec* gpu = find_gpu_spec(gpu_name);
  const vmm::CostTable* costs = vmm::find_cost_table(gpu_name);
  if (gpu == nullptr || costs == nullptr) {
    std::string list;
    for (const auto& name : vmm::cost_table_names()) list += (list.empty() ? "" : ", ") + std::string(name);
    throw UsageError("--gpu: unknown GPU '" + gpu_name + "' (known: " + list + ")");
  }
  std::vector<std::string> allocators = allocator_model_names();
  if (args.option("--allocators", &text)) {
    allocators = split_list(text);
    if (allocators.empty()) throw UsageError("--allocators: expected a comma-separated list of models");
    const auto known = allocator_model_names();
    for (const auto& a : allocators) {
      if (std::find(known.begin(), known.end(), a) == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        throw UsageError("--allocators: unknown model '" + a + "' (known: " + list + ")");
      }
    }
  }
  const bool json = args.flag("--json");
  std::string report_dir;
  const bool report = args.option("--report", &report_dir);
  bool swept = false;
  SweepParameter sweep_parameter = SweepParameter::MicroBatch;
  if (args.option("--sweep", &text)) {
    if (!parse_sweep_parameter(text, &sweep_parameter)) throw UsageError("--sweep: expected mbs or seq, got '" + text + "'");
    if (options.capacity == 0) throw UsageError("--sweep needs --capacity");
    swept = true;
  }
  std::uint64_t run_iterations = kDefaultRunIterations;
  if (args.option("--run-iterations", &text)) {
    const auto n = parse_u64(text);
    if (!n || *n == 0 || *n > (std::uint64_t{1} << 40)) {
      throw UsageError("--run-iterations: expected a number of iterations from 1 to 2^40, got '" + text + "'");
    }
    run_iterations = *n;
  }
  std::optional<std::uint32_t> repeat;
  if (args.option("--repeat", &text)) {
    const auto n = parse_u64(text);
    if (!n || *n > 1000) throw UsageError("--repeat: expected a number of copies from 0 to 1000, got '" + text + "'");
    repeat = static_cast<std::uint32_t>(*n);
  }
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  if (args.option("--jobs", &text)) {
    const auto n = parse_u64(text);
    if (!n || *n == 0 || *n > 1024) throw UsageError("--jobs: expected a number of threads from 1 to 1024, got '" + text + "'");
    jobs = static_cast<unsigned>(*n);
  }
  std::vector<std::string> preset_names = args.options("--preset");
  std::string suite;
  bool has_suite = args.option("--suite", &suite);
  const std::vector<std::string> files = args.positionals();
  // No workload named at all: the default suite, so that a bare `stalloc sim` shows the table.
  if (!has_suite && files.empty() && preset_names.empty()) {
    suite = "default";
    has_suite = true;
  }

  // A snapshot given as a TRACE: read as such rather than refused as a trace without a header.
  auto is_pickle_file = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char head[2] = {0, 0};
    in.read(head, 2);
    return in.gcount() == 2 && looks_like_pickle(std::string_view(head, 2));
  };
  std::vector<std::unique_ptr<Workload>> workloads;
  auto add_preset = [&](const std::string& name) {
    auto w = std::make_unique<Workload>();
    w->config = preset(name);  // throws for an unknown preset, listing the known ones
    w->name = name;
    w->generated = true;
    w->load = [cfg = w->config] { return generate_trace(cfg); };
    workloads.push_back(std::move(w));
  };
  auto add_file = [&](const std::string& path) {
    auto w = std::make_unique<Workload>();
    w->name = trace_stem(path);
    w->load = [path] { return read_trace(path); };
    workloads.push_back(std::move(w));
  };
  // A PyTorch memory snapshot: one workload per device traced, imported as `stalloc import
  // pytorch` would.
  auto add_snapshot = [&](const std::string& path) {
    const std::string bytes = read_file_bytes(path);
    const std::vector<Trace> devices = import_pytorch_snapshot(bytes, path);
    for (const Trace& t : devices) {
      auto w = std::make_unique<Workload>();
      w->name = trace_stem(std::filesystem::path(path).stem().string()) +
                (devices.size() > 1 ? ".dev" + std::to_string(t.device) : "");
      w->load = [t] { return t; };
      workloads.push_back(std::move(w));
    }
  };
  if (has_suite) {
    if (suite == "default") {
      for (const PresetInfo& p : presets()) {
        if (p.name != "tiny") preset_names.push_back(p.name);
      }
    } else if (suite == "real") {
      // The libtorch captures, then the real GPU snapshots, one workload per device traced.
      for (const std::string& path : files_in(data_dir("real"), ".trace")) add_file(path);
      for (const std::string& path : files_in(data_dir("snapshots"), ".pickle")) add_snapshot(path);
    } else {
      throw UsageError("--suite: expected default or real, got '" + suite + "'");
    }
  }
  for (const std::string& name : preset_names) add_preset(name);
  for (const std::string& path : files) {
    if (is_pickle_file(path)) {
      add_snapshot(path);
    } else {
      add_file(path);
    }
  }
  if (workloads.empty()) throw UsageError("no workload: give trace files, --preset NAME or --suite default|real");
  if (swept) {
    for (const auto& w : workloads) {
      if (!w->generated) throw UsageError("--sweep works on presets only ('" + w->name + "' is a trace file)");
    }
  }

  // The traces are read first, so that a bad file is reported before any run starts; then each
  // is made long enough to reach its steady state (its last iteration repeated).
  parallel_for(workloads.size(), jobs, [&](std::size_t i) {
    Workload& w = *workloads[i];
    const Trace& recorded = trace_of(w);
    w.repeated = repeat ? *repeat : default_repetitions(recorded);
    w.trace = with_repeated_last_iteration(recorded, w.repeated);
  });

  const std::size_t runs = workloads.size() * allocators.size();
  std::vector<SimResult> results(runs);
  std::atomic<std::size_t> done{0};
  std::mutex progress;
  const bool show_progress = runs > 1;
  parallel_for(runs, jobs, [&](std::size_t i) {
    Workload& w = *workloads[i / allocators.size()];
    const std::string& allocator = allocators[i % allocators.size()];
    results[i] = simulate(trace_of(w), w.name, allocator, options);
    results[i].repeated_iterations = w.repeated;
    estimate_time(trace_of(w), *gpu, *costs, &results[i], run_iterations);
    if (show_progress) {
      std::lock_guard<std::mutex> lock(progress);
      std::fprintf(stderr, "sim: [%zu/%zu] %s / %s: %.0f ms\n", ++done, runs, w.name.c_str(), allocator.c_str(),
                   results[i].milliseconds);
    }
  });

  // What the recorded run itself held, for a snapshot whose segments say (the importer's
  // recorded_peak_reserved_bytes), after the models' rows of its workload.
  {
    std::vector<SimResult> with_actual;
    for (std::size_t w = 0; w < workloads.size(); ++w) {
      for (std::size_t a = 0; a < allocators.size(); ++a) with_actual.push_back(std::move(results[w * allocators.size() + a]));
      const Trace& t = trace_of(*workloads[w]);
      auto held = t.meta.find("recorded_peak_reserved_bytes");
      if (held == t.meta.end()) continue;
      SimResult actual;
      actual.workload = workloads[w]->name;
      auto expandable = t.meta.find("pytorch_expandable_segments");
      actual.allocator = expandable == t.meta.end() ? "actual"
                         : expandable->second == "true" ? "actual (pytorch-expandable)"
                                                        : "actual (pytorch)";
      actual.peak_allocated_bytes = lower_bound_bytes(t);
      actual.peak_reserved_bytes = std::strtoull(held->second.c_str(), nullptr, 10);
      actual.utilization = actual.peak_reserved_bytes == 0
                               ? 1.0
                               : static_cast<double>(actual.peak_allocated_bytes) /
                                     static_cast<double>(actual.peak_reserved_bytes);
      actual.waste_bytes = actual.peak_reserved_bytes - std::min(actual.peak_reserved_bytes, actual.peak_allocated_bytes);
      actual.recorded = true;
      actual.time.gpu = gpu_name;
      actual.time.iteration_seconds = iteration_time(t, *gpu).seconds;
      actual.time.iteration_source = iteration_time(t, *gpu).source;
      actual.time.run_iterations = run_iterations;
      with_actual.push_back(std::move(actual));
    }
    results = std::move(with_actual);
  }

  std::vector<SweepResult> sweep;
  if (swept) {
    const std::size_t searches = workloads.size() * allocators.size();
    sweep.resize(searches);
    std::atomic<std::size_t> finished{0};
    parallel_for(searches, jobs, [&](std::size_t i) {
      const Workload& w = *workloads[i / allocators.size()];
      sweep[i] = sweep_largest(w.config, sweep_parameter, allocators[i % allocators.size()], options);
      std::lock_guard<std::mutex> lock(progress);
      std::fprintf(stderr, "sim: sweep [%zu/%zu] %s / %s: %llu\n", ++finished, searches, w.name.c_str(),
                   sweep[i].allocator.c_str(), static_cast<unsigned long long>(sweep[i].largest));
    });
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (json) {
    print_json(results, sweep, swept, options.gpu_lag);
  } else {
    print_table(results, options.capacity);
    print_iteration_times(results);
    if (swept) print_sweep(sweep, options.capacity);
    if (options.gpu_lag > 0) {
      std::printf("stalloc rows under a GPU lag of %u queries: memory the GPU may still use is not "
                  "moved or released until its events complete\n",
                  options.gpu_lag);
    }
  }
  if (report) {
    ReportInput input;
    input.command = "stalloc sim";
    for (const auto& a : raw) input.command += " " + a;
    input.capacity = options.capacity;
    input.seconds = seconds;
    input.results = std::move(results);
    input.sweep = std::move(sweep);
    const std::string path = write_html_report(report_dir, input);
    std::fprintf(stderr, "sim: report written to %s\n", path.c_str());
  }
  std::fprintf(stderr, "sim: %zu runs in %.1f s\n", runs, seconds);
  return 0;
}

}  // namespace

STALLOC_COMMAND(Command{"sim", "compare allocator models on traces or presets (table, JSON, HTML report)", kUsage, sim});

}  // namespace stalloc::cli
