// Offline-allocation problems as CSV (id,lower,upper,size: minimalloc's format) to and from
// traces. A problem's intervals become a trace's lifetimes and back, preserving which pairs
// overlap and therefore the lower bound.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

#include "trace/trace.h"

namespace stalloc {

// Endpoints sorted by time, frees before allocations at equal times (intervals are
// half-open), then by id. Requires lower < upper and distinct ids.
Trace import_interval_csv(std::string_view csv, const std::string& input_name);

// id,lower,upper,size with lower/upper the request indices of a tensor's allocation and free;
// a tensor never freed has upper = the number of events. Throws UsageError on a malformed
// trace (see validate_trace).
void write_interval_csv(const Trace& trace, std::ostream& out);

}  // namespace stalloc
