// Any bytes given to the trace reader (text traces above all: the seeds are text) either parse
// or raise ParseError; what parses survives a text write and read unchanged. parse_trace is
// called directly: read_trace(istream) only gathers the stream into a string first, in 1 MiB
// zero-filled blocks, which would make each small input cost a megabyte of memset.
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "common/error.h"
#include "trace/trace_io.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  Trace t;
  try {
    t = parse_trace(fuzz::as_text(data, size), "fuzz");
  } catch (const ParseError&) {
    return 0;
  }
  std::ostringstream out;
  write_trace(t, out, TraceFormat::Text);
  try {
    fuzz::require(parse_trace(out.str(), "fuzz-roundtrip") == t);
  } catch (const ParseError&) {
    fuzz::require(false);
  }
  return 0;
}
