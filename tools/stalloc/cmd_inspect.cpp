// `stalloc inspect TRACE [--json] [--small BYTES]`: what a trace holds
// (trace/trace_stats.h).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "trace/trace_io.h"
#include "trace/trace_stats.h"
#include "tools/stalloc/command.h"

namespace stalloc::cli {

namespace {

constexpr const char* kUsage =
    "usage: stalloc inspect TRACE [--json] [--small BYTES]\n\n"
    "Prints counts, the lower bound (peak of live bytes) and where it occurs, a power-of-two\n"
    "size histogram, whether iterations repeat (periodic: every iteration after the first has\n"
    "the same (size, stream) sequence, at least two of them), and the share of allocated bytes\n"
    "that is persistent, small, dynamic or static. Exits 1 when the trace is malformed (a free\n"
    "of an id that is not live, ...), after printing what it found.\n"
    "  --json         machine-readable output\n"
    "  --small BYTES  allocations below this are 'small' (default 2MiB)";

double share(std::uint64_t part, std::uint64_t total) {
  return total == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(total);
}

std::string percent(std::uint64_t part, std::uint64_t total) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * share(part, total));
  return buf;
}

void print_json(const Trace& trace, const TraceStats& s) {
  JsonWriter w(std::cout);
  w.begin_object();
  w.field("device", trace.device);
  w.field("events", s.events);
  w.field("allocations", s.allocations);
  w.field("frees", s.frees);
  w.field("persistent", s.persistent);
  w.field("iterations", s.iterations);
  w.field("streams", s.streams);
  w.field("lower_bound_bytes", s.lower_bound_bytes);
  w.field("lower_bound_event", s.lower_bound_event);
  w.field("lower_bound_iteration", static_cast<std::uint64_t>(s.lower_bound_iteration));
  w.field("distinct_sizes", s.distinct_sizes);
  w.field("periodic", s.periodic);
  w.field("iteration_signatures", s.iteration_signatures);
  w.key("size_histogram").begin_array();
  for (const SizeBucket& b : s.size_histogram) {
    w.begin_object().field("min_bytes", b.min_bytes).field("count", b.count).field("bytes", b.bytes).end_object();
  }
  w.end_array();
  w.field("small_threshold_bytes", s.small_threshold);
  w.key("bytes").begin_object();
  w.field("total", s.total_bytes).field("persistent", s.persistent_bytes).field("small", s.small_bytes);
  w.field("dynamic", s.dynamic_bytes).field("static", s.static_bytes);
  w.end_object();
  w.key("share").begin_object();
  w.field("persistent", share(s.persistent_bytes, s.total_bytes)).field("small", share(s.small_bytes, s.total_bytes));
  w.field("dynamic", share(s.dynamic_bytes, s.total_bytes)).field("static", share(s.static_bytes, s.total_bytes));
  w.end_object();
  w.key("meta").begin_object();
  for (const auto& [k, v] : trace.meta) w.field(k, v);
  w.end_object();
  w.key("problem");
  if (s.problem.empty()) {
    w.null();
  } else {
    w.value(s.problem);
  }
  w.end_object();
  std::cout << "\n";
}

void print_text(const std::string& path, const Trace& trace, const TraceStats& s) {
  auto meta = [&](const char* key) {
    auto it = trace.meta.find(key);
    return it == trace.meta.end() ? std::string("-") : it->second;
  };
  std::cout << "trace           " << path << " (device " << trace.device << ", source " << meta("source") << ")\n"
            << "events          " << s.events << " (" << s.allocations << " allocations, " << s.frees << " frees, "
            << s.persistent << " never freed)\n"
            << "iterations      " << s.iterations << " (periodic: " << (s.periodic ? "yes" : "no") << ", "
            << s.iteration_signatures << " distinct signatures)\n"
            << "streams         " << s.streams << "\n"
            << "lower bound     " << format_bytes(s.lower_bound_bytes) << " (" << s.lower_bound_bytes << " B) at event "
            << s.lower_bound_event << ", iteration " << s.lower_bound_iteration << "\n"
            << "distinct sizes  " << s.distinct_sizes << "\n"
            << "bytes           " << format_bytes(s.total_bytes) << " allocated in all: persistent "
            << percent(s.persistent_bytes, s.total_bytes) << ", small (< " << format_bytes(s.small_threshold) << ") "
            << percent(s.small_bytes, s.total_bytes) << ", dynamic " << percent(s.dynamic_bytes, s.total_bytes)
            << ", static " << percent(s.static_bytes, s.total_bytes) << "\n"
            << "size histogram  (size from, allocations, bytes)\n";
  for (const SizeBucket& b : s.size_histogram) {
    char row[96];
    std::snprintf(row, sizeof row, "  %12s  %10llu  %s\n", format_bytes(b.min_bytes).c_str(),
                  static_cast<unsigned long long>(b.count), format_bytes(b.bytes).c_str());
    std::cout << row;
  }
  if (!s.problem.empty()) std::cout << "problem         " << s.problem << "\n";
}

int run_inspect(const std::vector<std::string>& raw) {
  Args args(raw);
  bool json = args.flag("--json");
  TraceStatsOptions options;
  std::string small;
  if (args.option("--small", &small)) {
    auto bytes = parse_bytes(small);
    if (!bytes) throw UsageError("--small expects a byte count like 2MiB or 1048576, got '" + small + "'");
    options.small_threshold = *bytes;
  }
  std::vector<std::string> pos = args.positionals();
  if (pos.size() != 1) throw UsageError(std::string("expected one TRACE\n") + kUsage);
  Trace trace = read_trace(pos[0]);
  TraceStats stats = compute_trace_stats(trace, options);
  if (json) {
    print_json(trace, stats);
  } else {
    print_text(pos[0], trace, stats);
  }
  if (!stats.problem.empty()) {
    std::cerr << "stalloc inspect: " << pos[0] << ": malformed trace: " << stats.problem << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

STALLOC_COMMAND(Command{"inspect", "summarise a trace: counts, lower bound, sizes, periodicity", kUsage, run_inspect});

}  // namespace stalloc::cli
