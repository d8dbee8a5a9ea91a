// Reading and writing stalloc's own trace files (format in docs/formats.md).
//   text  ("*.trace" or anything else): line-oriented, diffs well, versioned header.
//   binary ("*.traceb"): compact, for large traces.
// Both round-trip a Trace exactly. Bad input raises ParseError(file, line, what was expected);
// for the binary form the "line" is the 1-based record number (0 for the header).
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

#include "trace/trace.h"

namespace stalloc {

enum class TraceFormat { Text, Binary };

// The format a path's extension implies: ".traceb" is binary, anything else text.
TraceFormat trace_format_for(const std::string& path);

// Reads either format (detected from the file's first bytes, not its name).
Trace read_trace(const std::string& path);
Trace read_trace(std::istream& in, const std::string& name_for_errors);
// Parses a whole file already in memory (either format); what fuzzers and benchmarks call.
Trace parse_trace(std::string_view data, const std::string& name_for_errors);

// The whole file, for readers that parse from memory; ParseError(path, 0, ...) when unreadable.
std::string read_file_bytes(const std::string& path);

void write_trace(const Trace& trace, const std::string& path);  // format from the extension
void write_trace(const Trace& trace, std::ostream& out, TraceFormat format);

// The first bytes of a binary trace file.
inline constexpr std::string_view kBinaryTraceMagic{"\x89STLTRC\n", 8};
inline constexpr std::string_view kTextTraceHeader{"stalloc-trace"};

}  // namespace stalloc
