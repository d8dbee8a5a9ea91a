// Any bytes given to the trace reader either parse or raise ParseError; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/error.h"
#include "planner/trace_io.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    stalloc::Trace t = stalloc::read_trace(in, "fuzz");
    std::ostringstream out;
    stalloc::write_trace(t, out, stalloc::TraceFormat::Text);
    std::istringstream again(out.str());
    if (!(stalloc::read_trace(again, "fuzz-roundtrip") == t)) __builtin_trap();
  } catch (const stalloc::ParseError&) {
  }
  return 0;
}
