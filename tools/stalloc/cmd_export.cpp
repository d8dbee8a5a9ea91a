// `stalloc export FORMAT TRACE -o OUTPUT`: writes a trace in another form.
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "trace/import_csv.h"
#include "trace/trace_io.h"
#include "tools/stalloc/command.h"

namespace stalloc::cli {

namespace {

constexpr const char* kUsage =
    "usage: stalloc export FORMAT TRACE -o OUTPUT\n\n"
    "FORMAT:\n"
    "  csv     the trace's lifetimes as id,lower,upper,size, lower/upper in request indices\n"
    "          (a tensor never freed has upper = the number of events): minimalloc's input\n"
    "  text    stalloc text trace\n"
    "  binary  stalloc binary trace (.traceb)\n"
    "  -o, --output PATH  the file to write";

int run_export(const std::vector<std::string>& raw) {
  Args args(raw);
  std::string output;
  if (!args.option("--output", &output)) args.option("-o", &output);
  std::vector<std::string> pos = args.positionals();
  if (pos.size() != 2 || output.empty()) throw UsageError(std::string("expected FORMAT TRACE -o OUTPUT\n") + kUsage);
  const std::string& format = pos[0];
  if (format != "csv" && format != "text" && format != "binary") {
    throw UsageError("unknown export format '" + format + "' (csv, text, binary)");
  }
  Trace trace = read_trace(pos[1]);
  if (format == "csv") {
    std::string problem = validate_trace(trace);
    if (!problem.empty()) throw UsageError(pos[1] + ": cannot export a malformed trace: " + problem);
  }
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  if (!out) throw UsageError("cannot open " + output + " for writing");
  if (format == "csv") {
    write_interval_csv(trace, out);
  } else {
    write_trace(trace, out, format == "binary" ? TraceFormat::Binary : TraceFormat::Text);
  }
  out.flush();
  if (!out) throw UsageError("cannot write " + output);
  std::cout << "wrote " << output << ": " << trace.events.size() << " events\n";
  return 0;
}

}  // namespace

STALLOC_COMMAND(Command{"export", "write a trace as CSV lifetimes (minimalloc) or in the other trace form", kUsage,
                        run_export});

}  // namespace stalloc::cli
