// The DSA (minimalloc) CSV reader on any text either returns a problem that satisfies its
// documented checks or raises ParseError.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <unordered_set>

#include "common/error.h"
#include "planner/dsa/dsa_csv.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  std::istringstream in{std::string(fuzz::as_text(data, size))};
  try {
    DsaCsv csv = read_dsa_csv(in, "fuzz.csv");
    std::unordered_set<std::uint64_t> ids;
    for (const DsaBuffer& b : csv.buffers) {
      fuzz::require(b.lower < b.upper && b.size > 0 && ids.insert(b.id).second);
    }
    if (csv.offsets) fuzz::require(csv.offsets->size() == csv.buffers.size());
  } catch (const ParseError&) {
  }
  return 0;
}
