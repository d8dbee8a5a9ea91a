// What the runtime allocator reports: memory (allocated, reserved, their peaks), how well the
// plans are followed (matches, misses), plan installs, VMM calls, and why the last request
// that ran out of memory failed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "vmm/driver.h"

namespace stalloc {

struct OomReport {
  std::uint64_t requested_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t capacity_bytes = 0;  // 0: unlimited
  std::string reason;
  // The live tensors and the request exceed the capacity (or the device): failed at once,
  // nothing released or waited for.
  bool beyond_capacity = false;
  // Served again after frees of other threads, within RuntimeConfig::oom_wait_seconds.
  std::uint64_t retries = 0;
  double waited_seconds = 0;
};

// One of PyTorch's request statistics (torch.cuda.memory_stats): its value, its peak, and what
// was added and taken in all.
struct RequestCounter {
  std::uint64_t current = 0;
  std::uint64_t peak = 0;
  std::uint64_t allocated = 0;
  std::uint64_t freed = 0;
  void increase(std::uint64_t n) {
    current += n;
    allocated += n;
    peak = current > peak ? current : peak;
  }
  void decrease(std::uint64_t n) {
    current -= n;
    freed += n;
  }
};

// PyTorch's pools: every request, those up to kSmallRequestBytes ("small_pool"), the others.
enum RequestPool : std::size_t { kAllRequests, kSmallRequests, kLargeRequests, kRequestPools };
inline constexpr std::uint64_t kSmallRequestBytes = std::uint64_t{1} << 20;

// Live allocations and their requested bytes, by pool: counted when the runtime serves a request
// and when it takes back a block it served, with the size it recorded (so never below zero).
struct RequestStats {
  std::array<RequestCounter, kRequestPools> count;
  std::array<RequestCounter, kRequestPools> bytes;
  void add(std::uint64_t size, int sign);
};

struct RuntimeStats {
  std::uint64_t allocated_bytes = 0;       // requested bytes of live tensors
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t reserved_bytes = 0;        // physical chunks held (pool, dynamic, packed, cache)
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t cached_bytes = 0;          // reserved chunks held idle for reuse
  std::uint64_t pool_bytes = 0;            // the plan pool
  std::uint64_t lent_bytes = 0;            // pool chunks lent to the packed arenas
  std::uint64_t packed_bytes = 0;          // requested bytes live in the packed arenas (unplanned)
  std::uint64_t dedicated_bytes = 0;       // requested bytes live in dedicated ranges (unplanned)
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t matches = 0;               // requests served from their planned slot
  std::uint64_t misses = 0;                // requests served dynamically while a plan was active
  std::uint64_t conflicts = 0;             // matched slots whose chunks were still occupied
  std::uint64_t unplanned = 0;             // requests served with no plan active
  std::uint64_t iterations = 0;            // completed iterations (explicit or automatic steps)
  std::uint64_t auto_steps = 0;
  std::uint64_t plan_installs = 0;
  std::uint64_t plan_failures = 0;         // plans that could not be made or installed
  std::uint64_t plans_declined = 0;        // made, not installed: would hold more than online
  std::uint64_t plans_deferred = 0;        // made, not installed: fixed slots of sizes just changed
  std::uint64_t plans_installed = 0;       // now in the cache
  std::uint64_t plans_pending = 0;         // being planned in the background
  std::uint64_t plans_retiring = 0;        // evicted, mapped until the GPU is done with them
  std::uint64_t plans_unmapped = 0;        // installed, no stage of their views mapped yet
  // Host waits for the device at a plan's install: its pool would have grown past the most ever
  // held beside emptied memory the GPU may still use (Runtime::install_finished).
  std::uint64_t install_waits = 0;
  // Plan pool runs (chunks sharing one physical handle, pool_runs.h) split into chunks alone,
  // for a later plan's install or for the lender (Runtime::split_run).
  std::uint64_t runs_split = 0;
  // Host waits for the device so that the lender could split runs (at most one per iteration).
  std::uint64_t split_waits = 0;
  // Large unplanned requests served in stream order from cached ranges the GPU still used (a
  // slightly larger one whole, or one shared), where a range would otherwise have been made
  // beside them (dedicated_ranges.h).
  std::uint64_t dedicated_behind_gpu = 0;
  std::uint64_t stream_waits = 0;          // cuStreamWaitEvent calls for chunks changing stream
  std::uint64_t stream_waits_on_marks = 0; // of those, waits on a free mark (not an event recorded at the reuse)
  std::uint64_t invalid_frees = 0;         // frees of pointers the runtime did not hand out
  std::uint64_t capture_refusals = 0;      // mallocs refused: their stream was being captured
  std::uint64_t capture_deferred_frees = 0;  // frees held until their stream's capture ended
  std::uint64_t ooms = 0;
  // Requests that failed, waited for frees of other threads and were served then.
  std::uint64_t alloc_retries = 0;
  std::uint64_t waiting_for_frees = 0;  // requests waiting now for other threads' frees
  OomReport last_oom;
  RequestStats requests;
  std::string last_plan_error;
  std::string last_plan_declined;  // why the last plan made was declined or deferred
  vmm::DriverCounters driver;

  // map + unmap + set_access + create + release + reserve + free: what a steady iteration must
  // avoid.
  std::uint64_t vmm_calls() const {
    return driver.maps + driver.unmaps + driver.set_accesses + driver.creates + driver.releases +
           driver.reserves + driver.frees;
  }
  // cuEventRecord + cuEventQuery + cuStreamWaitEvent + cuStreamIsCapturing: cheaper than VMM calls, still host time
  // on the allocation path.
  std::uint64_t event_calls() const {
    return driver.event_records + driver.event_queries + driver.stream_waits +
           driver.capture_queries;
  }
};

void write_stats_json(const RuntimeStats& stats, std::ostream& out);

}  // namespace stalloc
