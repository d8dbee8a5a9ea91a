// STAlloc artifact trace -> trace. The markers carry the iteration and the phase; the n-th
// "micro-batch : F" of an iteration starts forward micro-batch n-1, and likewise for B, which
// is the order a pipeline schedule runs them in on one stage.
#include "trace/import_artifact.h"

#include <charconv>

#include "common/error.h"
#include "trace/import_support.h"

namespace stalloc {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// For "NAME : VALUE" lines: the VALUE when `line` starts with `name`, else nullopt-like false.
bool marker_value(std::string_view line, std::string_view name, std::string_view* value) {
  if (line.substr(0, name.size()) != name) return false;
  std::string_view rest = trim(line.substr(name.size()));
  if (rest.empty() || rest.front() != ':') return false;
  *value = trim(rest.substr(1));
  return true;
}

std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

}  // namespace

Trace import_stalloc_artifact(std::string_view text, const std::string& input_name) {
  Trace trace;
  AddressTracker tracker(&trace);
  StreamIndexer streams;
  LineReader lines(text);
  std::string_view line;
  std::uint32_t iteration = 0;
  Phase phase = Phase::Unknown;
  std::int32_t microbatch = -1;
  std::int32_t forward_seen = 0, backward_seen = 0;
  std::uint64_t unknown_frees = 0;
  while (lines.next(&line)) {
    auto fail = [&](const std::string& what) { throw ParseError(input_name, lines.line_no(), what); };
    line = trim(line);
    if (line.empty()) continue;
    std::string_view value;
    if (marker_value(line, "Iteration Index", &value)) {
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), iteration);
      if (value.empty() || ec != std::errc() || p != value.data() + value.size()) {
        fail("expected 'Iteration Index : N' with N a 32-bit unsigned integer, got '" + std::string(value) + "'");
      }
      forward_seen = backward_seen = 0;
      phase = Phase::Unknown;
      microbatch = -1;
      continue;
    }
    if (marker_value(line, "micro-batch", &value)) {
      if (value == "F") {
        phase = Phase::Forward;
        microbatch = forward_seen++;
      } else if (value == "B") {
        phase = Phase::Backward;
        microbatch = backward_seen++;
      } else {
        fail("expected 'micro-batch : F' or 'micro-batch : B', got '" + std::string(value) + "'");
      }
      continue;
    }
    std::vector<std::string_view> f = fields(line);
    if (f.size() != 4 || (f[0] != "0" && f[0] != "1")) {
      fail("expected '1 PTR SIZE STREAM', '0 PTR SIZE STREAM', 'Iteration Index : N' or 'micro-batch : F|B', got '" +
           std::string(line.substr(0, 80)) + "'");
    }
    std::uint64_t ptr = 0, size = 0, stream = 0;
    if (!parse_address(f[1], &ptr)) fail("expected PTR (decimal or 0x hex), got '" + std::string(f[1]) + "'");
    if (!parse_address(f[2], &size)) fail("expected SIZE (unsigned integer), got '" + std::string(f[2]) + "'");
    if (!parse_address(f[3], &stream)) fail("expected STREAM (decimal or 0x hex), got '" + std::string(f[3]) + "'");
    Event e;
    e.size = size;
    e.stream = streams.index(stream);
    e.iteration = iteration;
    e.phase = phase;
    e.microbatch = microbatch;
    if (f[0] == "1") {
      if (!tracker.alloc(ptr, e)) fail("allocation at " + std::string(f[1]) + " which is still live");
    } else if (!tracker.free(ptr, e)) {
      ++unknown_frees;  // allocated before tracing started
    }
  }
  trace.meta["source"] = "stalloc-artifact";
  trace.meta["input"] = file_basename(input_name);
  if (unknown_frees) trace.meta["skipped_unknown_frees"] = std::to_string(unknown_frees);
  check_imported(trace, input_name);
  return trace;
}

}  // namespace stalloc
