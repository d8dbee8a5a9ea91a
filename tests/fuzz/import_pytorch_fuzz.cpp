// The PyTorch snapshot importer on any bytes either returns well-formed traces or raises
// ParseError.
#include <cstddef>
#include <cstdint>

#include "common/error.h"
#include "trace/import_pytorch.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  try {
    for (const Trace& t : import_pytorch_snapshot(fuzz::as_text(data, size), "fuzz.pickle")) {
      fuzz::require_well_formed(t);
    }
  } catch (const ParseError&) {
  }
  return 0;
}
