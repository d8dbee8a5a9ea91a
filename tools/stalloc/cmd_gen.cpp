// `stalloc gen`: writes a synthetic training trace (workload/generator.h) from a preset
// or a fully custom configuration; every configuration field is a flag.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/units.h"
#include "workload/generator.h"
#include "trace/trace_io.h"
#include "tools/stalloc/command.h"

namespace stalloc::cli {

namespace {

std::string usage() {
  std::string u =
      "usage: stalloc gen [--preset NAME] -o OUT [--iterations N] [--seed S] [--KEY VALUE ...]\n"
      "       stalloc gen --list\n\n"
      "Generates one pipeline rank's allocation trace of a Megatron-LM-style transformer\n"
      "training run (docs/workloads.md) and writes it to OUT (\".traceb\": binary, else text).\n"
      "Without --preset every field starts at its default (Llama-7B-like, one GPU). A one-line\n"
      "summary goes to stderr.\n"
      "  --list          the presets, one line each\n"
      "  --preset NAME   start from a preset\n"
      "  -o, --output    the trace file to write\n"
      "configuration fields (--KEY VALUE; booleans on|off):\n ";
  std::size_t column = 1;
  for (const std::string& name : config_field_names()) {
    if (column + name.size() + 3 > 90) {
      u += "\n ";
      column = 1;
    }
    u += " --" + name;
    column += name.size() + 3;
  }
  return u;
}

int run_gen(const std::vector<std::string>& argv) {
  Args args(argv);
  if (args.flag("--list")) {
    for (const PresetInfo& p : presets()) std::printf("%-20s %s\n", p.name.c_str(), p.description.c_str());
    return 0;
  }
  std::string name, out;
  GeneratorConfig cfg;
  if (args.option("--preset", &name)) cfg = preset(name);
  if (!args.option("--output", &out)) args.option("-o", &out);
  for (const std::string& key : config_field_names()) {
    std::string value;
    std::string underscored = key;
    for (char& c : underscored) {
      if (c == '-') c = '_';
    }
    while (args.option("--" + key, &value) || args.option("--" + underscored, &value)) {
      set_config_field(cfg, key, value);
    }
  }
  if (!args.positionals().empty()) throw UsageError("unexpected argument '" + args.positionals()[0] + "'");
  if (out.empty()) throw UsageError("missing -o OUT (see stalloc gen --help)");

  const Trace trace = generate_trace(cfg);
  write_trace(trace, out);
  std::uint64_t allocations = 0, dynamic = 0;
  for (const Event& e : trace.events) {
    if (e.kind != EventKind::Alloc) continue;
    ++allocations;
    if (e.dynamic) ++dynamic;
  }
  std::fprintf(stderr,
               "gen %s: %zu events (%llu allocations, %llu dynamic), %llu iterations of %llu "
               "micro-batches, lower bound %s -> %s\n",
               cfg.name.c_str(), trace.events.size(), static_cast<unsigned long long>(allocations),
               static_cast<unsigned long long>(dynamic), static_cast<unsigned long long>(cfg.iterations),
               static_cast<unsigned long long>(microbatches_per_iteration(cfg)),
               format_bytes(lower_bound_bytes(trace)).c_str(), out.c_str());
  return 0;
}

}  // namespace

STALLOC_COMMAND(Command{"gen", "generate a synthetic training trace (presets: --list)", usage(), run_gen});

}  // namespace stalloc::cli
