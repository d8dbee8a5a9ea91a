// Any bytes given to the plan reader either parse or raise ParseError; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/error.h"
#include "planner/chunk_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    stalloc::read_plan(in, "fuzz");
  } catch (const stalloc::ParseError&) {
  }
  return 0;
}
