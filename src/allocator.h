// stalloc::Runtime, the allocator PyTorch calls through torch_ext: profile -> plan -> replay.
//
// Iterations 0 .. profile_iterations-1 are served on the dynamic path and recorded; from
// iteration profile_iterations on, every iteration whose request signature has no plan (and
// that did not follow the active plan but for one request in a hundred) is planned in the
// background (planner/chunk/chunk_plan.h) and the plan is installed at the next boundary; iterations with a plan are served from it: each request is matched to the next
// planned slot (ordinal, size, stream), with a look-ahead to resynchronise after a request the
// plan does not have. A request matched to a Dynamic slot (sizes that vary) takes bytes of the
// view mapped on the slot's budget when they are free. Anything unmatched, or that does not fit
// there, is packed into its stream's packed arenas (packed_arena.h), small and large requests
// apart (once the runtime holds 128 MiB) so that small short-lived tensors do not pin the pages
// of large ones. Their pages borrow
// the plan pool's idle chunks before creating any (idle_chunk_lender.h): memory grows beside
// the pool only when the iteration needs more than the pool holds idle.
//
// Every entry point takes one mutex; the planned path under it is a comparison, an occupancy
// check on the slot's chunks and a few stores. Chunk creation, mapping and planning happen at
// iteration boundaries (step) or on the background thread, never on the planned path.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "planner/chunk/chunk_plan.h"
#include "src/dedicated_ranges.h"
#include "src/idle_chunk_lender.h"
#include "src/live_slot_table.h"
#include "src/packed_arena.h"
#include "src/period_detector.h"
#include "src/physical_memory.h"
#include "src/plan_cache.h"
#include "src/plan_pool.h"
#include "src/recorder.h"
#include "src/runtime_config.h"
#include "src/runtime_stats.h"
#include "src/stream_sync.h"
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
  // Makes its own driver for `device` from config.backend (throws vmm::DriverUnavailable).
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
  struct Unplanned {
    std::uint64_t id = 0;
    std::uint64_t size = 0;
    std::uint32_t stream = 0;
    StreamMask used_by = 0;
    PackedArena* arena = nullptr;  // null: a dedicated range
  };

  Runtime(const RuntimeConfig& config, std::unique_ptr<vmm::Driver> owned,
          vmm::Driver* external);
  // The slot the request matched, if any, and its address; 0 to serve it dynamically (*budget:
  // the budget chunks of the Dynamic slot it matched, else empty).
  vmm::DevicePtr serve_planned(std::uint64_t size, std::uint32_t stream, std::size_t* slot_index,
                               std::span<const std::uint32_t>* budget);
  std::size_t match(const InstalledPlan& plan, std::uint64_t size, std::uint32_t stream) const;
  void switch_plan(std::uint64_t size, std::uint32_t stream);
  void end_iteration();
  void disown_detected_iterations(const std::string& why);
  // Pool chunks that live tensors of disowned plans hold (empty when there are none).
  // Per pool run (at its first chunk): it may be split for a plan's install, no tenant in it,
  // none of its chunks in `held`.
  std::vector<bool> splittable_runs(const std::vector<bool>& held) const;
  // Splits the pool run headed at `head` into chunks alone (PlanPool::split_run), for a plan's
  // install or for the lender: only with no tenant, the GPU done with it and no retiring plan
  // mapping it; the views that map it map its chunks one by one in its place
  // (InstalledPlan::unmap_run, map_run_again). False when it could not be, and then for the
  // rest of the iteration.
  bool split_run(std::uint32_t head);
  std::vector<bool> chunks_held_by_disowned() const;
  // Requests of this iteration no slot of the active plan took, plus its slots no request took.
  std::uint64_t slots_not_taken() const;  // of the followed plan, in this iteration
  std::uint64_t off_plan_requests() const;
  std::uint64_t off_plan_bytes() const;
  // The iteration followed the active plan closely enough to count as its (kOffPlanShare).
  bool served_by_active() const;
  // Whether a finished plan would make the runtime hold more than the online path did (*why).
  bool declines(const ChunkPlan& plan, std::string* why) const;
  // Installs the plans finished in the background from iterations before `made_before`.
  void install_finished(std::uint32_t made_before = UINT32_MAX);
  // Before the pool grows to `chunks` for a plan about to be installed: where that would take
  // the runtime past the most it ever held while emptied pages and cached ranges still wait for
  // the GPU (their unmaps pending, so their chunks are not yet the pool's to take), one host
  // wait for the device first. Without it the pool was made beside them: under a GPU lag of 3
  // queries, llama3-8b-64k-cp4 held 62.8% utilization, 99.1% with it (docs/runtime.md,
  // "Waiting for the GPU at an install").
  void wait_before_pool_growth(std::uint64_t chunks);
  // Chunk mappings a plan installed now may hold: the live mappings limit (max_mappings, else
  // the driver's) less what is mapped already and an eighth for the unplanned paths.
  std::uint64_t plan_mapping_room() const;
  // The mapping room for a plan that needs `needed`, after retiring idle plans if that is what
  // it takes.
  std::uint64_t make_mapping_room(std::uint64_t needed);
  InstalledPlan::MappingRoom mapping_room();
  // Live mappings are a budget, not a wall: an installed plan that no tensor lives in keeps its
  // views mapped only for a later iteration of its signature. Retires those but `keep` (the
  // plan followed stops being followed if retired); true when mappings came back.
  bool retire_idle_plans(const InstalledPlan* keep);
  // Unmaps installed plans' views that no live tensor uses (InstalledPlan::shed_idle_views);
  // returns the mappings freed.
  std::uint64_t shed_plan_views();
  // Unmaps what retired plans and shed views wait for once the GPU is done with it, after a
  // device synchronisation when some is still pending; true when mappings came back.
  bool wait_for_unmaps();
  // Unmaps what the GPU is done with; true when live mappings fell below `before`.
  bool unmap_completed(std::uint64_t before);
  bool unmaps_pending() const;
  // The driver says work on `stream` is being captured into a CUDA graph.
  bool captured(vmm::StreamHandle stream);
  void check_not_capturing(vmm::StreamHandle stream, std::size_t size);
  void grant_peer_access();
  void free_locked(vmm::DevicePtr p);
  // Frees made while their stream was captured, done once the capture is over.
  void take_deferred_frees();
  void choose_plan();
  std::uint16_t thread_index();
  void log(const std::string& line) const;
  bool free_planned(vmm::DevicePtr p, std::uint16_t thread);
  PackedArena& packed_arena(std::uint32_t stream, std::uint64_t size);
  void poll_unplanned();
  // Serves a request no slot took from its stream's packed arena.
  vmm::DevicePtr serve_unplanned(std::uint64_t size, std::uint32_t stream,
                                 std::span<const std::uint32_t> budget, PackedArena** arena);
  // Pages the packed arenas retired.
  std::uint64_t release_idle_unplanned();
  // Idle arena pages the GPU is done with, the oldest first, until `bytes` are given back or
  // none is left (PackedArena::give_idle_chunk); returns the bytes given.
  std::uint64_t give_idle_pages(std::uint64_t bytes);
  // What the arenas' emptied pages hold (PackedArena::emptied_bytes), together.
  std::uint64_t emptied_unplanned_bytes() const;

  RuntimeConfig config_;
  std::unique_ptr<vmm::Driver> owned_driver_;
  vmm::Driver& driver_;
  std::uint64_t granularity_;
  std::uint64_t base_capacity_;

  mutable std::mutex mutex_;
  StreamSync sync_;
  PhysicalMemory memory_;
  PlanPool pool_;
  IdleChunkLender lender_;
  // By pool run (its first chunk): the iteration (+1) in which its split was refused.
  std::vector<std::uint64_t> split_refused_;
  std::uint64_t split_wait_iteration_ = 0;  // the iteration (+1) that waited for a split
  DedicatedRanges dedicated_;  // large unplanned tensors while no plan is followed
  // Per stream, [2s] for unplanned requests up to small_size and [2s + 1] for larger ones.
  std::vector<std::unique_ptr<PackedArena>> packed_;
  PlanCache cache_;
  Recorder recorder_;
  PeriodDetector detector_;
  std::unordered_map<vmm::DevicePtr, Unplanned> unplanned_;
  LiveSlotTable live_planned_;
  std::vector<ChunkPiece> conflict_pieces_;  // a slot's footprint, for the lender
  std::vector<std::thread::id> threads_;

  // The iteration being served.
  InstalledPlan* active_ = nullptr;
  std::size_t cursor_ = 0;             // next slot expected
  // The last slots the cursor stepped over on a mismatch (SIZE_MAX: none), still takeable.
  std::array<std::size_t, 8> skipped_{SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX,
                                      SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
  std::size_t skipped_next_ = 0;
  std::size_t missed_at_ = SIZE_MAX;  // the fixed slot the last request missed, left in place
  std::uint64_t allocs_in_iteration_ = 0;
  std::uint64_t misses_in_iteration_ = 0;       // requests no slot took
  std::uint64_t slots_taken_in_iteration_ = 0;  // slots a request took (conflicts included)
  std::uint64_t missed_bytes_in_iteration_ = 0;
  std::uint64_t taken_slot_bytes_in_iteration_ = 0;
  // This iteration outgrew what the followed plan leaves idle and the most ever held: any idle
  // pool chunk may be lent (Runtime::serve_unplanned).
  bool lend_any_ = false;
  std::uint64_t live_allocations_ = 0;
  struct DeferredFree {
    vmm::DevicePtr ptr = 0;
    vmm::StreamHandle stream = 0;
  };
  std::vector<DeferredFree> deferred_frees_;
  bool explicit_steps_ = false;
  // Iterations before this one were cut by the period detector and then disowned by the
  // program's own step(): profiling starts again here, and plans used at or before
  // `disowned_stamp_` are not chosen.
  std::uint32_t profile_base_ = 0;
  std::uint64_t disowned_stamp_ = 0;
  bool have_last_key_ = false;
  SignatureKey last_key_;
  // How often each signature followed another: the next iteration is predicted to be the most
  // frequent successor of the last one, so that a one-off iteration (an extra tensor, another
  // structure) is not taken for the new pattern.
  struct Transition {
    SignatureKey from;
    SignatureKey to;
    std::uint64_t count = 0;
  };
  std::vector<Transition> transitions_;
  std::uint64_t stamp_ = 0;

  RuntimeStats stats_;
};

}  // namespace stalloc
