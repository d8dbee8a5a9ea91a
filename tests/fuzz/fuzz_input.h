// What every fuzz target shares: the input as a string_view, and the verdict on an input that
// "parsed" - a trace an importer returns must be well formed, since the importers promise to
// reject (not pass on) inconsistent input. A property that fails calls __builtin_trap so that
// libFuzzer records the input as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trace/trace.h"

namespace stalloc::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

inline void require(bool property) {
  if (!property) __builtin_trap();
}

inline void require_well_formed(const Trace& trace) { require(validate_trace(trace).empty()); }

}  // namespace stalloc::fuzz
