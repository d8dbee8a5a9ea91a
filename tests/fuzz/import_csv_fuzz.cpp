// The interval CSV importer on any text either returns a well-formed trace or raises
// ParseError.
#include <cstddef>
#include <cstdint>

#include "common/error.h"
#include "trace/import_csv.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  try {
    fuzz::require_well_formed(import_interval_csv(fuzz::as_text(data, size), "fuzz.csv"));
  } catch (const ParseError&) {
  }
  return 0;
}
