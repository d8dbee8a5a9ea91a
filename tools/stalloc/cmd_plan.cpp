// `stalloc plan`: with --dsa, solves a MiniMalloc-style offset problem from CSV (--dsa-generate
// writes one); otherwise plans a trace (plan_trace_command, owned by the trace planner).
#include <cmath>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_csv.h"
#include "planner/dsa/dsa_generator.h"
#include "planner/dsa/placement_validator.h"
#include "tools/stalloc/command.h"
#include "tools/stalloc/plan_trace_command.h"

namespace stalloc::cli {

namespace {

constexpr const char* kUsage =
    "usage: stalloc plan --dsa IN.csv --output OUT.csv [--capacity BYTES] [--time-limit SECONDS]\n"
    "                    [--work-limit N] [--seed N] [--strategy anytime|best-fit-decreasing]\n"
    "                    [--json]\n"
    "       stalloc plan --dsa-generate irregular|training --buffers N [--seed N] --output OUT.csv\n"
    "       stalloc plan TRACE... -o PLAN [--mode alias|offset|windowed] [--iteration K]\n"
    "                    [--granularity BYTES] [--windows N] [--time-limit SECONDS]\n"
    "                    [--remainder widened|aligned|auto] [--json]\n\n"
    "TRACE: plan one iteration of each trace into a physical-chunk plan (with several traces,\n"
    "one a rank, PLAN.rankN for the N-th), validated by the independent plan validator before\n"
    "it is written (stalloc replay --plan installs it).\n"
    "  -o, --output PLAN     where to write the plan\n"
    "  --mode M              alias (default: every slot its own view), offset (one pool laid out\n"
    "                        by offsets) or windowed (views mapped per time window)\n"
    "  --iteration K         the iteration planned (default 1, the first after warm-up; 0 for a\n"
    "                        trace of one iteration)\n"
    "  --granularity BYTES   chunk size (default 2MiB)\n"
    "  --windows N           windowed mode: mapping windows per iteration (default 8)\n"
    "  --time-limit SECONDS  the offset planner's limit for the packed tails (default its own)\n"
    "  --remainder R         how a slot's tail is placed: widened (default), aligned, or auto\n"
    "                        (both, the smaller plan kept)\n"
    "  --json                print the plans' figures as JSON\n\n"
    "--dsa: read buffers (id,lower,upper,size) from IN.csv, give each an offset so that buffers\n"
    "live at the same time do not overlap, with the smallest peak found, and write\n"
    "id,lower,upper,size,offset to OUT.csv (-o is an alias of --output). The exit status is 0\n"
    "whenever a valid placement was written, also when its peak is above --capacity; every\n"
    "placement is checked by the independent validator before it is written.\n"
    "  --capacity BYTES      the peak wanted (e.g. 1048576, 64MiB); the search stops once the\n"
    "                        peak is within it; default: the lower bound\n"
    "  --time-limit SECONDS  wall-clock time for the whole run (default 10): the heuristics,\n"
    "                        then the search improves until the limit or until the peak reaches\n"
    "                        the lower bound (or the capacity), or is proved optimal; heuristics\n"
    "                        still running at the limit give up, but for the start-time sweeps\n"
    "                        (O(n log n)), which always complete so that a placement exists;\n"
    "                        0: the heuristics only (with --work-limit: no time limit)\n"
    "  --work-limit N        bound the search by work instead of, or as well as, time: N buffer\n"
    "                        placements summed over the searches (a node of the exact search\n"
    "                        places one buffer, an order of the order search every buffer of its\n"
    "                        component, a window the buffers in it); default 0: none. With\n"
    "                        --time-limit 0 the result is the same on every run and machine\n"
    "                        for a seed; --json then adds work_limit and work (the work done)\n"
    "  --seed N              seed of the search (default 1); with --time-limit 0 the result is\n"
    "                        deterministic for a seed\n"
    "  --strategy S          anytime (default), or best-fit-decreasing: the plain baseline alone\n"
    "  --json                print {peak_bytes, lower_bound_bytes, ratio, within_capacity,\n"
    "                        milliseconds, seconds, time_limit_seconds, stop, validated,\n"
    "                        stopped_at_lower_bound, greedy_peak_bytes,\n"
    "                        best_fit_decreasing_peak_bytes, buffers, strategy}, and with a\n"
    "                        time limit time_limit_met and cut_by_time_limit (the heuristics\n"
    "                        it cut short)\n"
    "--dsa-generate: write a seeded offset problem (id,lower,upper,size) to OUT.csv: irregular\n"
    "(a compiler's whole-program plan: phases, temporaries, skewed sizes) or training (iterations\n"
    "of a training run, 512-byte alignment, which the CSV does not carry).";

int generate_dsa(const std::vector<std::string>& raw) {
  Args args(raw);
  std::string kind_name;
  std::string output;
  std::string text;
  args.option("--dsa-generate", &kind_name);
  if (!args.option("--output", &output)) args.option("-o", &output);
  DsaGeneratorOptions options;
  const auto kind = parse_dsa_instance_kind(kind_name);
  if (!kind) throw UsageError("--dsa-generate: expected irregular or training, got '" + kind_name + "'");
  options.kind = *kind;
  if (!args.option("--buffers", &text)) throw UsageError("--dsa-generate needs --buffers N");
  const auto buffers = parse_u64(text);
  if (!buffers || *buffers == 0 || *buffers > 100'000'000)
    throw UsageError("--buffers: expected a count from 1 to 100000000, got '" + text + "'");
  options.buffers = static_cast<std::size_t>(*buffers);
  if (args.option("--seed", &text)) {
    const auto seed = parse_u64(text);
    if (!seed) throw UsageError("--seed: expected a non-negative integer, got '" + text + "'");
    options.seed = *seed;
  }
  if (!args.positionals().empty())
    throw UsageError("unexpected argument '" + args.positionals()[0] + "'");
  if (output.empty()) throw UsageError("--output OUT.csv is required");
  const auto problem = generate_dsa_instance(options);
  write_dsa_csv_file(output, problem, {});
  DsaProblem p;
  p.buffers = problem;
  std::cout << "wrote " << output << ": " << problem.size() << " buffers ("
            << dsa_instance_kind_name(options.kind) << ", seed " << options.seed
            << "), lower bound " << format_bytes(dsa_lower_bound(p)) << "\n";
  return 0;
}

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
  const bool has_work_limit = args.option("--work-limit", &text);
  if (has_work_limit) {
    const auto work = parse_u64(text);
    if (!work) {
      throw UsageError("--work-limit: expected a non-negative integer, got '" + text + "'");
    }
    options.work_limit = *work;
  }
  if (args.option("--seed", &text)) {
    const auto seed = parse_u64(text);
    if (!seed) throw UsageError("--seed: expected a non-negative integer, got '" + text + "'");
    options.seed = *seed;
  }
  bool baseline = false;
  if (args.option("--strategy", &text)) {
    if (text == "best-fit-decreasing") {
      baseline = true;
    } else if (text != "anytime") {
      throw UsageError("--strategy: expected anytime or best-fit-decreasing, got '" + text + "'");
    }
  }
  const bool json = args.flag("--json");
  if (!args.positionals().empty())
    throw UsageError("unexpected argument '" + args.positionals()[0] + "'");
  if (input.empty()) throw UsageError("--dsa needs an input CSV");
  if (output.empty()) throw UsageError("--output OUT.csv is required");

  DsaCsv csv = read_dsa_csv_file(input);
  problem.buffers = std::move(csv.buffers);
  const DsaSolution solution =
      baseline ? best_fit_decreasing(problem) : solve_dsa(problem, options);
  const double limit = baseline ? 0.0 : options.time_limit_seconds;
  // The independent check (it shares no code with the solver) before anything is written.
  std::vector<PlacedBuffer> placed;
  placed.reserve(problem.buffers.size());
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const DsaBuffer& b = problem.buffers[i];
    placed.push_back({b.id, b.lower, b.upper, b.size, b.alignment, solution.offsets[i]});
  }
  const PlacementReport check = validate_placement(placed);
  if (!check.ok || check.peak_bytes != solution.peak_bytes) {
    throw std::runtime_error("the placement failed the independent check: " +
                (check.ok ? "peak " + std::to_string(check.peak_bytes) + " is not the reported " +
                                std::to_string(solution.peak_bytes)
                          : check.error));
  }
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
    w.field("seconds", solution.milliseconds / 1000.0);
    w.field("time_limit_seconds", limit);
    if (!baseline && limit > 0) {
      w.field("time_limit_met", solution.milliseconds <= limit * 1000.0);
      w.field("cut_by_time_limit", solution.cut_by_time_limit);
    }
    if (has_work_limit) {
      w.field("work_limit", baseline ? std::uint64_t{0} : options.work_limit);
      w.field("work", solution.work);
    }
    w.field("stop", dsa_stop_name(solution.stop));
    w.field("stopped_at_lower_bound", solution.stopped_at_lower_bound());
    w.field("greedy_peak_bytes", solution.greedy_peak_bytes);
    w.field("validated", true);
    if (solution.best_fit_decreasing_peak_bytes != 0) {
      w.field("best_fit_decreasing_peak_bytes", solution.best_fit_decreasing_peak_bytes);
    }
    w.field("buffers", static_cast<std::uint64_t>(problem.buffers.size()));
    w.field("strategy", solution.strategy);
    w.end_object();
    std::cout << "\n";
  } else {
    std::cout << problem.buffers.size() << " buffers: peak " << format_bytes(solution.peak_bytes)
              << " (" << solution.peak_bytes << " B), lower bound "
              << format_bytes(solution.lower_bound_bytes) << ", ratio " << ratio << ", by "
              << solution.strategy;
    if (has_capacity) {
      std::cout << (solution.within_capacity ? ", within" : ", ABOVE") << " the capacity "
                << format_bytes(problem.capacity);
    }
    const double used = solution.milliseconds / 1000.0;
    std::cout << "\n";
    switch (solution.stop) {
      case DsaStop::LowerBound:
        std::cout << "stopped at the lower bound after " << used << " s";
        break;
      case DsaStop::Capacity:
        std::cout << "stopped within the capacity after " << used << " s";
        break;
      case DsaStop::ProvedOptimal:
        std::cout << "stopped after " << used << " s: no lower peak exists (proved)";
        break;
      case DsaStop::TimeLimit:
        std::cout << "used the time limit: " << used << " s of " << limit << " s";
        if (used > limit) {
          std::cout << " (not met: the placement that always completes, by start-time sweeps, "
                       "with the bounds and the time components took that long)";
        }
        break;
      case DsaStop::WorkLimit:
        std::cout << "used the work limit: " << solution.work << " of " << options.work_limit
                  << " after " << used << " s";
        break;
      case DsaStop::NoSearch:
        std::cout << "no search (" << (baseline ? "best-fit-decreasing" : "time limit 0")
                  << "): " << used << " s";
        break;
    }
    if (!baseline && solution.best_fit_decreasing_peak_bytes != 0) {
      std::cout << "; best-fit-decreasing alone: ratio "
                << (solution.lower_bound_bytes == 0
                        ? 1.0
                        : static_cast<double>(solution.best_fit_decreasing_peak_bytes) /
                              static_cast<double>(solution.lower_bound_bytes));
    }
    if (solution.cut_by_time_limit != 0) {
      std::cout << "; " << solution.cut_by_time_limit << " heuristic"
                << (solution.cut_by_time_limit == 1 ? "" : "s") << " cut by the time limit";
    }
    std::cout << "\nwrote " << output << "\n";
  }
  return 0;
}

int plan(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--dsa-generate" || a.rfind("--dsa-generate=", 0) == 0) return generate_dsa(args);
  }
  for (const std::string& a : args) {
    if (a == "--dsa" || a.rfind("--dsa=", 0) == 0) return plan_dsa(args);
  }
  return plan_trace_command(args);
}

}  // namespace

STALLOC_COMMAND(Command{"plan", "plan a trace into a chunk plan, or an offset problem (--dsa)",
                        kUsage, plan});

}  // namespace stalloc::cli
