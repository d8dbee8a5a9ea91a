// Reading and writing stalloc's own trace files (format in docs/formats.md).
//   text  ("*.trace" or anything else): line-oriented, diffs well, versioned header.
//   binary ("*.traceb"): compact, for large traces.
// Both round-trip a Trace exactly. Bad input raises ParseError(file, line, what was expected).
#pragma once

#include <iosfwd>
#include <string>

#include "planner/trace.h"

namespace stalloc {

enum class TraceFormat { Text, Binary };

// The format a path's extension implies: ".traceb" is binary, anything else text.
TraceFormat trace_format_for(const std::string& path);

// Reads either format (detected from the file's first bytes, not its name).
Trace read_trace(const std::string& path);
Trace read_trace(std::istream& in, const std::string& name_for_errors);

void write_trace(const Trace& trace, const std::string& path);  // format from the extension
void write_trace(const Trace& trace, std::ostream& out, TraceFormat format);

}  // namespace stalloc
