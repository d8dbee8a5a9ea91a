// parse_trace on any bytes (binary traces above all: the seeds start with the binary magic)
// either parses or raises ParseError; what parses survives a write and read unchanged in both
// forms, so a file that reads can always be converted (stalloc export).
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "common/error.h"
#include "trace/trace_io.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

void require_round_trip(const stalloc::Trace& t, stalloc::TraceFormat format) {
  std::ostringstream out;
  try {
    stalloc::write_trace(t, out, format);
    stalloc::fuzz::require(stalloc::parse_trace(out.str(), "fuzz-roundtrip") == t);
  } catch (const std::exception&) {
    stalloc::fuzz::require(false);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  Trace t;
  try {
    t = parse_trace(fuzz::as_text(data, size), "fuzz");
  } catch (const ParseError&) {
    return 0;
  }
  require_round_trip(t, TraceFormat::Binary);
  require_round_trip(t, TraceFormat::Text);
  return 0;
}
