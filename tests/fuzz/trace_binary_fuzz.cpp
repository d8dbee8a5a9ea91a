// parse_trace on any bytes (binary traces above all: seeds start with the binary magic) either
// parses or raises ParseError; what parses survives a binary write and read unchanged.
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "common/error.h"
#include "planner/trace_io.h"
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
  try {
    write_trace(t, out, TraceFormat::Binary);
  } catch (const UsageError&) {
    // A trace that reads but cannot be written in binary (an empty meta key from a text
    // trace) is refused with a clear error, which is allowed.
    return 0;
  }
  fuzz::require(parse_trace(out.str(), "fuzz-roundtrip") == t);
  return 0;
}
