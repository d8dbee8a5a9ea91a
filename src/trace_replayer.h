// Drives a Runtime with a trace's requests, as a training program would: a step() at each
// iteration boundary, backward requests (thread 1 in the trace) from a second host thread,
// handed over so that the global order of the trace is kept. Optionally writes a data pattern
// into each allocation and checks it before the free (sparse: the first and last 64 bytes and
// 64 bytes per MiB, so full-size traces fit in host memory), and times every malloc.
#pragma once

#include <cstdint>
#include <vector>

#include "trace/trace.h"
#include "src/runtime.h"

namespace stalloc {

struct ReplayOptions {
  bool verify = false;
  bool backward_thread = true;     // issue thread-1 events from a second std::thread
  bool wait_for_planning = true;   // deterministic: plans are installed at the next boundary
  bool time_mallocs = false;
  // step() at each of the trace's iteration boundaries; without, the runtime's own detection
  // (auto_step) is all there is.
  bool step = true;
  // The stream handle of each trace stream index; empty: the index is the handle (the host
  // backend's streams are numbers).
  std::vector<vmm::StreamHandle> streams;
};

struct IterationReport {
  std::uint32_t iteration = 0;
  std::uint64_t matches = 0;
  std::uint64_t misses = 0;
  std::uint64_t conflicts = 0;
  std::uint64_t vmm_calls = 0;      // map/unmap/set-access/create/release/reserve/free
  std::uint64_t creates = 0;        // of those, chunks created (cuMemCreate)
  std::uint64_t event_calls = 0;    // event record/query, stream waits
  std::uint64_t plans_installed = 0;
  std::size_t first_malloc = 0;     // where its mallocs start in ReplayResult::malloc_ns
};

struct ReplayResult {
  // Peaks over the whole replay; the runtime's own peaks restart after each plan install, so
  // its stats() at the end describe the steady state.
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t verify_errors = 0;
  std::uint64_t failed_allocations = 0;
  // Uses (at a malloc or a free) of bytes not mapped, as a lagging host driver sees them
  // (Driver::gpu_use): a GPU would fault.
  std::uint64_t unmapped_uses = 0;
  std::vector<std::uint64_t> malloc_ns;
  std::vector<IterationReport> iterations;
};

ReplayResult replay_trace(Runtime& runtime, const Trace& trace, const ReplayOptions& options);

}  // namespace stalloc
