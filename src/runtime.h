// stalloc::Runtime, the allocator PyTorch calls through torch_ext: profile -> plan -> replay.
//
// A facade over parts with one job each, under one mutex:
//   PlanFollower     matches each request to the next slot of the plan being followed
//   UnplannedServer  serves what no slot takes: packed arenas, dedicated ranges, the lender
//   PlanLifecycle    records iterations, plans them, installs, declines and chooses plans
//   RuntimeReclaimer what is given back, in which order, when something is short or a request
//                    fails (the one failure path)
// A request goes to the follower first; if no slot takes it, to the unplanned server; if that
// cannot serve it, to the failure path, once: a request that cannot fit beside the live tensors
// fails at once; else the reclaimer gives back what it can, in order, then the request waits
// (oom_wait_seconds, where other threads use the runtime) for their frees; then it fails
// (nullptr, and stats().last_oom says why). docs/architecture.md follows a request through them.
//
// PyTorch's statistics (allocations and requested bytes by pool) are counted here, for the
// requests served and the blocks taken back, with the runtime's own sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "planner/chunk/chunk_plan.h"
#include "src/physical_memory.h"
#include "src/plan_cache.h"
#include "src/plan_follower.h"
#include "src/plan_lifecycle.h"
#include "src/plan_pool.h"
#include "src/runtime_config.h"
#include "src/runtime_log.h"
#include "src/runtime_parts.h"
#include "src/runtime_reclaimer.h"
#include "src/runtime_stats.h"
#include "src/stream_sync.h"
#include "src/unplanned_server.h"
#include "vmm/driver.h"

namespace stalloc {

// A request on a stream being captured into a CUDA graph (begun outside PyTorch's CUDAGraph,
// which refuses earlier): the graph would keep an address stalloc gives to other tensors later.
class GraphCaptureError : public UsageError {
 public:
  using UsageError::UsageError;
};

class Runtime {
 public:
  // Makes its own driver for `device` (make_runtime_driver; throws vmm::DriverUnavailable).
  explicit Runtime(const RuntimeConfig& config, int device = 0);
  // Uses a driver the caller owns and keeps alive longer than the runtime.
  Runtime(const RuntimeConfig& config, vmm::Driver& driver);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // nullptr when out of memory (stats().last_oom says why) or for another device. Throws
  // GraphCaptureError when stream is being captured into a CUDA graph.
  void* malloc(std::size_t size, int device, vmm::StreamHandle stream);
  // size and stream are the allocation's (PyTorch passes them); the runtime trusts its records.
  // A free on a stream being captured waits, the memory held, until a later malloc or step()
  // finds the capture over: the events it records would otherwise become nodes of the graph.
  void free(void* ptr, std::size_t size, int device, vmm::StreamHandle stream);
  // Whether `ptr` is a live allocation this runtime served.
  bool owns(void* ptr) const;
  // The tensor is also used on `stream`: its memory is reused only after that stream's work.
  void record_stream(void* ptr, vmm::StreamHandle stream);
  // Releases cached idle chunks.
  void empty_cache();
  // Caps physical memory at fraction of the configured capacity, or of the device's memory
  // when no capacity is configured. Throws UsageError for a fraction outside (0, 1].
  void set_memory_fraction(double fraction);
  // Ends the current iteration.
  void step();
  RuntimeStats stats() const;
  // Peaks restart from the current values (torch.cuda.reset_peak_memory_stats).
  void reset_peak_stats();
  // What was allocated and freed in all, out-of-memory errors and retries restart from 0
  // (torch.cuda.reset_accumulated_memory_stats).
  void reset_accumulated_stats();
  // RuntimeConfig::oom_wait_seconds from now on (negative: 0).
  void set_oom_wait(double seconds);

  // Installs a plan made elsewhere (stalloc plan); throws UsageError when it cannot be installed.
  void add_plan(ChunkPlan plan);
  // Waits for background planning and installs what it produced (tests, deterministic replays).
  void wait_for_planning();

  void save_trace(const std::string& path) const;
  void save_snapshot(const std::string& path) const;
  std::string snapshot_pickle() const;

  vmm::Driver& driver() { return driver_; }
  std::uint64_t granularity() const { return granularity_; }
  const RuntimeConfig& config() const { return config_; }

 private:
  Runtime(const RuntimeConfig& config, std::unique_ptr<vmm::Driver> owned,
          vmm::Driver* external);
  // Serves a request no slot took (`budget`: the chunks of the Dynamic slot it outgrew, else
  // empty); *by: what served it. 0 after the failure path: out of memory.
  vmm::DevicePtr serve_unplanned(std::uint64_t size, std::uint32_t stream,
                                 std::span<const std::uint32_t> budget, SubAllocator** by,
                                 std::unique_lock<std::mutex>& lock);
  // The live tensors and a request of `size` exceed the capacity (or the device's memory).
  bool beyond_capacity(std::uint64_t size) const;
  // Waits, the mutex released, for other threads' frees until oom_wait_seconds have passed,
  // serving again after each; the address, or 0.
  vmm::DevicePtr serve_after_frees(const std::function<vmm::DevicePtr()>& serve,
                                   std::unique_lock<std::mutex>& lock);
  void free_locked(vmm::DevicePtr p);
  // The driver says work on `stream` is being captured into a CUDA graph.
  bool captured(vmm::StreamHandle stream);
  void check_not_capturing(vmm::StreamHandle stream, std::size_t size);
  // Frees made while their stream was captured, done once the capture is over.
  void take_deferred_frees();
  void grant_peer_access();
  RuntimeParts parts();
  std::uint16_t thread_index();

  RuntimeConfig config_;
  std::unique_ptr<vmm::Driver> owned_driver_;
  vmm::Driver& driver_;
  std::uint64_t granularity_;
  std::uint64_t base_capacity_;
  std::uint64_t device_bytes_;  // the device's memory, 0 when the driver cannot tell
  RuntimeLog log_;

  mutable std::mutex mutex_;
  std::condition_variable freed_;  // a free happened (for requests waiting in serve_after_frees)
  std::uint64_t waiting_ = 0;      // requests waiting for frees
  StreamSync sync_;
  PhysicalMemory memory_;
  PlanPool pool_;
  RuntimeReclaimer reclaimer_;
  UnplannedServer unplanned_;
  PlanCache cache_;  // after unplanned_: plans go before the arenas that borrow their chunks
  PlanLifecycle lifecycle_;
  PlanFollower follower_;
  std::vector<std::thread::id> threads_;

  std::uint64_t live_allocations_ = 0;
  struct DeferredFree {
    vmm::DevicePtr ptr = 0;
    vmm::StreamHandle stream = 0;
  };
  std::vector<DeferredFree> deferred_frees_;
  bool explicit_steps_ = false;
  bool invalid_free_logged_ = false;
  RuntimeStats stats_;
};

}  // namespace stalloc
