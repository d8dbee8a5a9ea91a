// `stalloc plan`: with --dsa, solves a MiniMalloc-style offset problem from CSV; otherwise plans
// a trace (plan_trace_command, owned by the trace planner).
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_csv.h"
#include "tools/stalloc/command.h"
#include "tools/stalloc/plan_trace_command.h"

namespace stalloc::cli {

namespace {

constexpr const char* kUsage =
    "usage: stalloc plan --dsa IN.csv --output OUT.csv [--capacity BYTES] [--time-limit SECONDS]\n"
    "                    [--seed N] [--json]\n"
    "       stalloc plan TRACE... -o PLAN ...   (see the trace planner's options)\n\n"
    "--dsa: read buffers (id,lower,upper,size) from IN.csv, give each an offset so that buffers\n"
    "live at the same time do not overlap, with the smallest peak found, and write\n"
    "id,lower,upper,size,offset to OUT.csv (-o is an alias of --output). The exit status is 0\n"
    "whenever a valid placement was written, also when its peak is above --capacity.\n"
    "  --capacity BYTES      the peak wanted (e.g. 1048576, 64MiB); default: the lower bound\n"
    "  --time-limit SECONDS  search time after the heuristics (default 10)\n"
    "  --seed N              tie-breaking seed; the result is deterministic for a seed (default "
    "1)\n"
    "  --json                print {peak_bytes, lower_bound_bytes, ratio, within_capacity,\n"
    "                        milliseconds, buffers, strategy}";

int plan_dsa(const std::vector<std::string>& raw) {
  Args args(raw);
  std::string input;
  std::string output;
  std::string text;
  args.option("--dsa", &input);
  if (!args.option("--output", &output)) args.option("-o", &output);
  DsaProblem problem;
  DsaOptions options;
  const bool has_capacity = args.option("--capacity", &text);
  if (has_capacity) {
    const auto capacity = parse_bytes(text);
    if (!capacity || *capacity == 0)
      throw UsageError("--capacity: expected a byte count above 0, got '" + text + "'");
    problem.capacity = *capacity;
  }
  if (args.option("--time-limit", &text)) {
    std::size_t used = 0;
    double seconds = -1;
    try {
      seconds = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || !std::isfinite(seconds) || seconds < 0) {
      throw UsageError("--time-limit: expected a number of seconds >= 0, got '" + text + "'");
    }
    options.time_limit_seconds = seconds;
  }
  if (args.option("--seed", &text)) {
    const auto seed = parse_u64(text);
    if (!seed) throw UsageError("--seed: expected a non-negative integer, got '" + text + "'");
    options.seed = *seed;
  }
  const bool json = args.flag("--json");
  if (!args.positionals().empty())
    throw UsageError("unexpected argument '" + args.positionals()[0] + "'");
  if (input.empty()) throw UsageError("--dsa needs an input CSV");
  if (output.empty()) throw UsageError("--output OUT.csv is required");

  DsaCsv csv = read_dsa_csv_file(input);
  problem.buffers = std::move(csv.buffers);
  const DsaSolution solution = solve_dsa(problem, options);
  write_dsa_csv_file(output, problem.buffers, solution.offsets);

  const double ratio = solution.lower_bound_bytes == 0
                           ? 1.0
                           : static_cast<double>(solution.peak_bytes) /
                                 static_cast<double>(solution.lower_bound_bytes);
  if (json) {
    JsonWriter w(std::cout);
    w.begin_object();
    w.field("peak_bytes", solution.peak_bytes);
    w.field("lower_bound_bytes", solution.lower_bound_bytes);
    w.field("ratio", ratio);
    if (has_capacity) w.field("within_capacity", solution.within_capacity);
    w.field("milliseconds", solution.milliseconds);
    w.field("buffers", static_cast<std::uint64_t>(problem.buffers.size()));
    w.field("strategy", solution.strategy);
    w.end_object();
    std::cout << "\n";
  } else {
    std::cout << problem.buffers.size() << " buffers: peak " << format_bytes(solution.peak_bytes)
              << " (" << solution.peak_bytes << " B), lower bound "
              << format_bytes(solution.lower_bound_bytes) << ", ratio " << ratio << ", by "
              << solution.strategy << " in " << solution.milliseconds << " ms";
    if (has_capacity) {
      std::cout << (solution.within_capacity ? ", within" : ", ABOVE") << " the capacity "
                << format_bytes(problem.capacity);
    }
    std::cout << "\nwrote " << output << "\n";
  }
  return 0;
}

int plan(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--dsa" || a.rfind("--dsa=", 0) == 0) return plan_dsa(args);
  }
  return plan_trace_command(args);
}

}  // namespace

STALLOC_COMMAND(Command{"plan", "plan a trace into a chunk plan, or an offset problem (--dsa)",
                        kUsage, plan});

}  // namespace stalloc::cli
