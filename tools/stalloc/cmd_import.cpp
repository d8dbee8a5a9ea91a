// `stalloc import FORMAT INPUT -o OUTPUT [--device N]`: converts another tool's allocation log
// into a stalloc trace (formats in docs/formats.md).
#include <charconv>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/units.h"
#include "trace/import_artifact.h"
#include "trace/import_csv.h"
#include "trace/import_pytorch.h"
#include "trace/import_rmm.h"
#include "trace/trace_io.h"
#include "tools/stalloc/command.h"

namespace stalloc::cli {

namespace {

constexpr const char* kUsage =
    "usage: stalloc import FORMAT INPUT -o OUTPUT [--device N]\n\n"
    "Converts INPUT to a stalloc trace; OUTPUT ending in .traceb is written binary, else text.\n"
    "FORMAT:\n"
    "  pytorch           torch.cuda.memory._dump_snapshot pickle (read safely: classes are\n"
    "                    refused); one OUTPUT per device with events, named OUTPUT with .devN\n"
    "                    before the extension when there are several; --device N: only device N.\n"
    "                    Blocks live before recording began are allocated at the start;\n"
    "                    iterations are found from the repeating allocation sequence; what the\n"
    "                    trace has no event for (oom, segment actions, unknown actions and keys)\n"
    "                    is counted in meta and printed\n"
    "  stalloc-artifact  STAlloc artifact trace: '1|0 PTR SIZE STREAM', 'Iteration Index : N',\n"
    "                    'micro-batch : F|B'\n"
    "  rmm               RMM logging CSV (Thread,Time,Action,Pointer,Size,Stream)\n"
    "  csv               offline allocation problem id,lower,upper,size (minimalloc)\n"
    "For formats other than pytorch, --device N sets the device the trace is recorded for.\n"
    "  -o, --output PATH  the trace to write";

// "run.trace" + 1 -> "run.dev1.trace"; a name without an extension gets ".dev1" appended.
std::string device_path(const std::string& path, int device) {
  std::size_t slash = path.find_last_of('/');
  std::size_t dot = path.find_last_of('.');
  std::string suffix = ".dev" + std::to_string(device);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == slash + 1 || dot == 0) {
    return path + suffix;
  }
  return path.substr(0, dot) + suffix + path.substr(dot);
}

std::string meta_or(const std::map<std::string, std::string>& meta, const char* key, const char* fallback) {
  auto it = meta.find(key);
  return it == meta.end() ? fallback : it->second;
}

std::string bytes_of(const std::string& decimal) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(decimal.data(), decimal.data() + decimal.size(), v);
  return ec == std::errc() && p == decimal.data() + decimal.size() ? format_bytes(v) : decimal;
}

// What the importer recorded in meta beyond the events: one "  key: value" line each, so that
// nothing it skipped goes unnoticed.
void print_summary(const std::map<std::string, std::string>& meta) {
  auto line = [&](const char* key, const std::string& detail = "") {
    auto it = meta.find(key);
    if (it == meta.end()) return;
    std::cout << "  " << key << ": " << it->second << (detail.empty() ? "" : " (" + detail + ")") << "\n";
  };
  if (meta.count("seeded_live_blocks")) {
    line("seeded_live_blocks", bytes_of(meta_or(meta, "seeded_live_bytes", "0")) + " live at the start: " +
                                   meta_or(meta, "seeded_from_frees", "0") + " freed unseen, " +
                                   meta_or(meta, "seeded_from_segments", "0") + " active in the dump-time segments");
  }
  if (meta.count("iteration_period")) {
    line("iterations", "repeating every " + meta.at("iteration_period") + " allocations");
  } else {
    line("iterations", "no repetition found");
  }
  line("iteration_seconds");
  for (const char* key : {"segment_alloc_events", "segment_free_events", "segment_map_events", "segment_unmap_events",
                          "snapshot_events"}) {
    line(key);
  }
  if (meta.count("oom_events")) line("oom_events", bytes_of(meta_or(meta, "oom_requested_bytes", "0")) + " requested");
  for (const char* key : {"skipped_unknown_frees", "skipped_failures", "skipped_segment_blocks"}) line(key);
  line("skipped_unknown_actions", meta_or(meta, "unknown_actions", ""));
  line("skipped_unknown_keys", meta_or(meta, "unknown_keys", ""));
}

int run_import(const std::vector<std::string>& raw) {
  Args args(raw);
  std::string output, device_text;
  if (!args.option("--output", &output)) args.option("-o", &output);
  bool has_device = args.option("--device", &device_text);
  std::vector<std::string> pos = args.positionals();
  if (pos.size() != 2 || output.empty()) throw UsageError(std::string("expected FORMAT INPUT -o OUTPUT\n") + kUsage);
  int device = 0;
  if (has_device) {
    auto [p, ec] = std::from_chars(device_text.data(), device_text.data() + device_text.size(), device);
    if (device_text.empty() || ec != std::errc() || p != device_text.data() + device_text.size() || device < 0) {
      throw UsageError("--device expects a device number, got '" + device_text + "'");
    }
  }
  const std::string& format = pos[0];
  const std::string& input = pos[1];
  std::vector<std::pair<std::string, Trace>> outputs;
  if (format == "pytorch") {
    std::vector<Trace> traces = import_pytorch_snapshot(read_file_bytes(input), input);
    if (has_device) {
      std::string found;
      for (Trace& t : traces) {
        if (t.device == device) {
          outputs.emplace_back(output, std::move(t));
        } else {
          if (!found.empty()) found += ", ";
          found += std::to_string(t.device);
        }
      }
      if (outputs.empty()) {
        throw UsageError("device " + std::to_string(device) + " has no alloc/free events in " + input +
                         (found.empty() ? std::string(" (no device has)") : " (devices with events: " + found + ")"));
      }
    } else {
      if (traces.empty()) throw UsageError(input + " has no alloc/free events in device_traces");
      for (Trace& t : traces) {
        std::string path = traces.size() == 1 ? output : device_path(output, t.device);
        outputs.emplace_back(path, std::move(t));
      }
    }
  } else {
    Trace t;
    if (format == "stalloc-artifact") {
      t = import_stalloc_artifact(read_file_bytes(input), input);
    } else if (format == "rmm") {
      t = import_rmm_log(read_file_bytes(input), input);
    } else if (format == "csv") {
      t = import_interval_csv(read_file_bytes(input), input);
    } else {
      throw UsageError("unknown import format '" + format + "' (pytorch, stalloc-artifact, rmm, csv)");
    }
    t.device = device;
    outputs.emplace_back(output, std::move(t));
  }
  for (const auto& [path, trace] : outputs) {
    write_trace(trace, path);
    std::uint64_t allocations = 0;
    for (const Event& e : trace.events) allocations += e.kind == EventKind::Alloc;
    std::cout << "wrote " << path << ": device " << trace.device << ", " << trace.events.size() << " events, "
              << allocations << " allocations, lower bound " << format_bytes(lower_bound_bytes(trace)) << "\n";
    print_summary(trace.meta);
  }
  return 0;
}

}  // namespace

STALLOC_COMMAND(Command{"import", "convert a PyTorch snapshot, STAlloc artifact, RMM log or CSV to a trace", kUsage,
                        run_import});

}  // namespace stalloc::cli
