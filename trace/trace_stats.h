// What `stalloc inspect` reports about a trace: counts, the lower bound and where it occurs,
// sizes, whether iterations repeat, and how the bytes split between kinds of tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/units.h"
#include "trace/trace.h"

namespace stalloc {

struct TraceStatsOptions {
  std::uint64_t small_threshold = 2 * MiB;  // allocations below this many bytes count as small
};

// Allocations whose size is in [min_bytes, 2 * min_bytes); min_bytes 0 holds size 0 only.
struct SizeBucket {
  std::uint64_t min_bytes = 0;
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
};

struct TraceStats {
  std::uint64_t events = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t persistent = 0;  // allocations never freed
  std::uint64_t iterations = 0;  // distinct iteration numbers
  std::uint64_t streams = 0;     // distinct stream indices
  std::uint64_t lower_bound_bytes = 0;
  std::uint64_t lower_bound_event = 0;      // first event index at which the peak is reached
  std::uint32_t lower_bound_iteration = 0;  // that event's iteration
  std::uint64_t distinct_sizes = 0;
  std::vector<SizeBucket> size_histogram;  // ascending, empty buckets left out
  // An iteration's signature is its allocations' (size, stream) sequence. Periodic: at least
  // two iterations after the first, all with one signature.
  bool periodic = false;
  std::uint64_t iteration_signatures = 0;  // distinct signatures over all iterations
  // Allocated bytes by kind; each allocation has one kind, tested in this order: persistent
  // (never freed), small (< small_threshold), dynamic (dynamic hint, or its size differs from
  // another iteration's allocation at the same ordinal), static (the rest). Ordinals are
  // compared across the iterations after the first, or across all when there are fewer than 3.
  std::uint64_t total_bytes = 0;
  std::uint64_t persistent_bytes = 0;
  std::uint64_t small_bytes = 0;
  std::uint64_t dynamic_bytes = 0;
  std::uint64_t static_bytes = 0;
  std::uint64_t small_threshold = 0;
  std::string problem;  // validate_trace's finding; the figures above still describe the events
};

// Works on malformed traces too (frees of unknown ids are ignored), so a broken trace can be
// inspected; `problem` says what is wrong with it.
TraceStats compute_trace_stats(const Trace& trace, const TraceStatsOptions& options = {});

}  // namespace stalloc
