// Any bytes given to the plan reader either parse or raise ParseError; nothing else may happen.
// A plan that parses writes out to a file that reads back to the same plan (compared through
// its written form, the plan having no equality of its own).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/error.h"
#include "planner/chunk/chunk_plan.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

std::string written(const stalloc::ChunkPlan& plan) {
  std::ostringstream out;
  stalloc::write_plan(plan, out);
  return out.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  std::istringstream in{std::string(fuzz::as_text(data, size))};
  ChunkPlan plan;
  try {
    plan = read_plan(in, "fuzz");
  } catch (const ParseError&) {
    return 0;
  }
  const std::string text = written(plan);
  std::istringstream again(text);
  try {
    fuzz::require(written(read_plan(again, "fuzz-roundtrip")) == text);
  } catch (const ParseError&) {
    fuzz::require(false);
  }
  return 0;
}
