// The safe unpickler on any bytes either returns a document or raises ParseError; walking the
// document (which may contain itself through the memo) must stay within it.
#include <cstddef>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "trace/safe_unpickler.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

// Visits every value reachable from the root once, reading each field, so that a dangling
// pointer in the document shows up under AddressSanitizer.
std::size_t walk(const stalloc::PickleValue& root) {
  std::unordered_set<const stalloc::PickleValue*> seen;
  std::vector<const stalloc::PickleValue*> stack{&root};
  std::size_t bytes = 0;
  while (!stack.empty()) {
    const stalloc::PickleValue* v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    bytes += v->text.size() + static_cast<std::size_t>(v->as_int() & 1);
    for (const auto* item : v->items) stack.push_back(item);
    for (const auto& [key, value] : v->entries) {
      stack.push_back(key);
      stack.push_back(value);
    }
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  try {
    PickleDocument doc = unpickle(fuzz::as_text(data, size), "fuzz.pickle");
    volatile std::size_t sink = walk(doc.root());
    (void)sink;
  } catch (const ParseError&) {
  }
  return 0;
}
