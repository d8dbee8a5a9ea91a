// A plan made live: every planned slot is served through a view, a virtual range inside the
// plan's one reservation, backed by pool chunks the plan names (each chunk mapped separately,
// or each run of chunks that share a handle, pool_runs.h: cuMemUnmap cannot split a mapping;
// access set once per stage of views). Alias mode maps every
// view once, stage by stage as the first iteration that follows the plan reaches them, so a
// steady iteration makes no VMM call, a plan never followed maps nothing, and one left after
// its first slots (its sizes changed) maps only the stages they reached.
// Windowed mode maps a view when the iteration reaches the first window in which one of its
// slots lives and unmaps it lazily after the last: events recorded on the streams that used it
// must have completed, which is only ever queried, never waited for.
//
// Why views are shared: a view is only a window onto a chunk sequence, so a slot whose chunks
// appear, in order, inside another slot's view can use that view at the right page. Slots are
// taken longest first and each looks among the views that hold its first chunk; this cuts the
// live mappings by a quarter to two fifths on the presets, and mappings are what a driver runs
// out of (the host backend at vm.max_map_count, a GPU driver somewhere unknown). Two slots then
// share an address only if they share bytes, which the plan makes them do at different times,
// so the free path finds a tenant by its address among the live ones.
//
// A Dynamic slot's view is its budget (chunks the plan leaves idle over its lifetime, enough for
// twice the largest size seen), mapped like any other: whatever size its tensor has in this
// iteration, it takes bytes of that view, with no VMM call, from the first page at which the
// pool finds them free (the budgets of Dynamic slots live at once may overlap; fit_dynamic sets
// the footprint of each tenant, and the occupancy check settles who gets them).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "planner/chunk/chunk_plan.h"
#include "src/plan_pool.h"
#include "src/reclaimer.h"
#include "src/run_relabelling.h"
#include "src/stream_sync.h"
#include "vmm/driver.h"

namespace stalloc {

struct SlotState {
  vmm::DevicePtr range = 0;        // where the slot's first chunk is mapped (0 without a view)
  Footprint footprint;             // the bytes it occupies in the pool (in the plan's tables)
  bool live = false;
  std::uint64_t tenant_id = 0;     // the live tenant's request id (recorder)
  std::uint64_t tenant_size = 0;   // its requested size (at most the slot's, but in a Dynamic one)
  std::uint32_t tenant_stream = 0;
  std::uint64_t shift = 0;         // a Dynamic slot's tenant starts this many pages' bytes in
  StreamMask used_by = 0;          // streams of the live tenant (record_stream adds to it)
};

class InstalledPlan {
 public:
  // Validates the plan against the pool's granularity, grows the pool and reserves its views'
  // address range (alias and offset modes: within the mapping room the reclaimer gives, a plan
  // that needs more is refused; the views are mapped later, see deferred()). Returns nullptr with *why on any
  // failure, leaving nothing behind.
  // Over a pool with runs (pool_runs.h) the plan's chunks are renumbered onto them first
  // (run_relabelling.h), within what `claims` allows; the reclaimer splits the runs it needs.
  static std::unique_ptr<InstalledPlan> install(ChunkPlan plan, vmm::Driver& driver,
                                                PlanPool& pool, StreamSync& sync,
                                                Reclaimer& reclaimer, std::string* why,
                                                const PoolClaims& claims = {});
  ~InstalledPlan();
  InstalledPlan(const InstalledPlan&) = delete;
  InstalledPlan& operator=(const InstalledPlan&) = delete;

  const ChunkPlan& plan() const { return plan_; }
  std::size_t slot_count() const { return slots_.size(); }
  SlotState& slot(std::size_t index) { return slots_[index]; }
  const SlotState& slot(std::size_t index) const { return slots_[index]; }
  vmm::DevicePtr address(std::size_t index) const {
    return slots_[index].range + plan_.slots[index].offset + slots_[index].shift;
  }

  // Windowed mode: the iteration reached the window of plan time `time`; maps the views whose
  // slots' lifetimes start by then, retires those that are over, and unmaps retired ones whose
  // events completed. Alias mode: nothing to do.
  void advance_to(std::uint64_t time);
  // Called at each iteration start.
  void restart_windows();
  // Makes sure a slot about to be handed out is mapped. False when the driver refused, or when
  // its views are not mapped yet and the iteration is not following the plan (`followed`
  // false: misses outnumber the slots taken), whose later slots would likely go unused.
  bool ensure_mapped(std::size_t index, bool followed = true);
  // Alias and offset modes install a plan unmapped and map its views in kMappingStages stages
  // of the iteration (a view belongs to the stage of the first slot that uses it; each stage's
  // views lie back to back in the reservation, access set on them in one call): the first
  // stage when the runtime expects the plan to be followed (map_first_stage) or at its first
  // slot handed out, each later one at the first slot of that stage while the iteration
  // follows the plan. A plan left after a few slots (its iteration's sizes changed) maps only
  // what those slots used. map_deferred maps every stage at once (a plan the caller gives).
  // False, that stage left unmapped, when the driver refuses.
  static constexpr std::uint32_t kMappingStages = 16;
  bool deferred() const { return mapped_stages_ < stage_pages_.size(); }
  // No stage mapped yet.
  bool unmapped() const { return !stage_pages_.empty() && mapped_stages_ == 0; }
  std::uint64_t deferred_pages() const {
    return deferred() ? bytes_ / granularity_ - stage_first_page(mapped_stages_) : 0;
  }
  bool map_first_stage() { return map_stages_through(0); }
  bool map_deferred() {
    return stage_pages_.empty() || map_stages_through(static_cast<std::uint32_t>(stage_pages_.size() - 1));
  }
  // Mapping pressure (what is served beside the plan cannot map): alias and offset modes unmap
  // views no live tensor uses, in view order (the iteration's first slots first), until
  // `wanted` mappings are freed or none is left; a view the GPU may still use waits for its
  // events and goes at a later call. ensure_mapped maps a shed view again when a slot wants it.
  // Returns the mappings freed.
  std::uint64_t shed_idle_views(std::uint64_t wanted);
  // Views shed, or left by their windows, whose unmaps wait for their events.
  bool unmaps_pending() const { return !retiring_.empty(); }
  // Unmaps those whose events completed; returns the mappings freed.
  std::uint64_t unmap_completed();

  // Where a tensor of `size` bytes may start in a Dynamic slot's view: at its first page or any
  // later one that leaves the tensor inside the slot's budget; 0 when none does.
  std::uint64_t dynamic_starts(std::size_t index, std::uint64_t size) const;
  // A Dynamic slot is about to take a tensor of `size` bytes starting `start` pages in (below
  // dynamic_starts): sets its footprint to the bytes the tensor covers.
  void fit_dynamic(std::size_t index, std::uint64_t size, std::uint64_t start);

  // Slots whose size varies between iterations: a smaller request fits in them.
  void set_varying(const std::vector<bool>& by_ordinal);
  bool varies(std::size_t index) const { return varies_[index]; }

  // The plan's chunks that no slot at or after `cursor` uses (Dynamic slots' budgets count),
  // so lending them until the iteration ends costs this plan nothing.
  std::span<const std::uint32_t> chunks_done_before(std::size_t cursor) const;

  bool idle() const { return live_slots_ == 0; }
  // Evicted from the plan cache: an event on every stream that used its views marks the work
  // that may still read or write them; unmapping them before (destroying the plan) could fault
  // kernels still in flight. gpu_done() says when the plan may be destroyed.
  void retire();
  bool gpu_done();
  void on_occupied(std::size_t index);
  void on_vacated(std::size_t index);
  std::uint64_t last_used = 0;  // plan cache LRU stamp

  // The views, each with the slots that use it (for snapshots).
  struct ViewInfo {
    vmm::DevicePtr base = 0;
    std::uint64_t pages = 0;
    std::vector<std::uint32_t> slots;
  };
  std::vector<ViewInfo> views() const;
  std::size_t view_count() const { return views_.size(); }
  // Chunk mappings the plan holds now.
  std::uint64_t live_mappings() const { return live_mappings_; }
  // Whether a view maps the pool chunk now.
  bool maps(std::uint32_t chunk);
  // Where a view maps a pool run whole: the view, and the run's first page in it.
  struct RunPlace {
    std::uint32_t view = 0;
    std::uint32_t page = 0;
    std::uint32_t run = 0;  // its entry in the view's runs
  };
  // The places where views map the run headed at `head` (its chunks without tenants, the GPU
  // done with them: the caller makes sure).
  std::vector<RunPlace> run_places(std::uint32_t head);
  // Unmaps the run at each place, and maps what the pool has there afterwards (after
  // PlanPool::split_run, its chunks alone), with one access call per place: the view stays
  // mapped, live tenants elsewhere in it untouched. A chunk the driver refuses to map is left
  // a hole (never handed out: a split that failed left it without a handle, occupied for good).
  void unmap_run(const std::vector<RunPlace>& places);
  void map_run_again(std::uint32_t head, std::uint32_t length, const std::vector<RunPlace>& places);

 private:
  struct View {
    std::uint64_t first_page = 0;        // in the reservation
    std::vector<std::uint32_t> chunks;   // pool chunks, in address order
    std::size_t mapped = 0;              // how many of them are mapped (all, or none between calls)
    std::vector<std::uint32_t> runs;     // the lengths of the pool runs mapped, one call each (kHole)
    std::vector<vmm::EventHandle> unmap_after;  // windowed: pending lazy unmap
    std::uint32_t first_window = UINT32_MAX;
    std::uint32_t last_window = 0;
    std::uint32_t stage = 0;  // alias and offset modes: when it is mapped (kMappingStages)
  };

  InstalledPlan(ChunkPlan plan, vmm::Driver& driver, PlanPool& pool, StreamSync& sync);
  // What backs a slot's range: its planned chunks, or a Dynamic slot's budget.
  const std::vector<std::uint32_t>& range_chunks(std::size_t index) const {
    const PlannedSlot& s = plan_.slots[index];
    return s.kind == SlotKind::Dynamic ? s.budget_chunks : s.chunks;
  }
  // Gives every slot with chunks a view; returns the reservation's pages.
  std::uint64_t lay_out_views();
  // Renumbers the slots' and the views' chunks onto the pool's runs (run_relabelling.h),
  // splitting the runs it chose to; after kSplitAttempts tries with splits that failed, none.
  static constexpr int kSplitAttempts = 3;
  void relabel_onto_pool_runs(const PoolClaims& claims, Reclaimer& reclaimer);
  // By pool chunk: in a Dynamic slot's budget (such chunks stay alone, pool_runs.h).
  std::vector<bool> budget_chunks() const;
  // What pool runs must be whole in: the views' chunks, and the slots' (pool_runs.h).
  std::vector<const std::vector<std::uint32_t>*> views_and_slots() const;
  // The runs the pool's new chunks come in for this plan's views (pool_runs.h), if the claims
  // allow runs.
  std::vector<std::uint32_t> new_pool_runs(const PoolClaims& claims) const;
  // Counts the mappings the views make on the pool's runs, the new chunks' in `runs`; what is
  // wrong when a view holds part of a run.
  std::string count_mappings(const std::vector<std::uint32_t>& runs, std::uint64_t* mappings) const;
  // Alias and offset modes: each view's stage, and the views laid out stage after stage.
  void lay_out_stages();
  std::uint64_t stage_first_page(std::uint32_t stage) const {
    return stage == 0 ? 0 : stage_pages_[stage - 1];
  }
  // Maps the stages up to `stage` not mapped yet, in order.
  bool map_stages_through(std::uint32_t stage);
  void order_chunks_by_last_use();
  // set_access: also set access on the view (a stage sets it on all its views at once).
  bool map_view(std::uint32_t view, bool set_access = true);
  void unmap_view(std::uint32_t view);
  void enter_window(std::uint32_t window);
  // A view no live slot needs: unmapped now if no stream used it since it was mapped, else
  // once the events recorded now on its streams complete (retiring_).
  void retire_view(std::uint32_t view);
  // Alias and offset modes: retires an idle view and unmaps it at once if its events are done.
  void shed_view(std::uint32_t view);
  // A view wanted again before its lazy unmap keeps its mapping.
  void cancel_unmap(std::uint32_t view);

  ChunkPlan plan_;
  vmm::Driver& driver_;
  PlanPool& pool_;
  StreamSync& sync_;
  std::uint64_t granularity_;
  vmm::DevicePtr base_ = 0;
  std::uint64_t bytes_ = 0;
  std::vector<SlotState> slots_;
  FootprintTable footprints_;  // of the slots with planned chunks, in slot order
  std::unordered_map<std::size_t, FootprintTable> dynamic_footprints_;  // a Dynamic slot's tenant
  std::vector<ChunkPiece> pieces_;  // fit_dynamic's scratch
  std::vector<std::uint32_t> slot_view_;  // UINT32_MAX for a slot without chunks
  std::vector<bool> varies_;
  std::vector<View> views_;
  // By pool chunk, the views that hold it (built when first asked: maps, run_places).
  std::vector<std::vector<std::uint32_t>> views_of_chunk_;
  const std::vector<std::uint32_t>& views_of(std::uint32_t chunk);
  // A run entry of a view that is not mapped (a hole, map_run_again): its length, this bit set.
  static constexpr std::uint32_t kHole = 1u << 31;
  // Per view, apart from the views so that the planned path's updates stay in cache: its live
  // slots, and the streams that used it since it was mapped.
  std::vector<std::uint32_t> view_live_;
  std::vector<StreamMask> view_used_by_;
  // Chunks by the last slot that uses them, ascending; last_use_sorted_ holds those slots.
  std::vector<std::uint32_t> by_last_use_;
  std::vector<std::uint32_t> last_use_sorted_;
  std::uint64_t live_slots_ = 0;
  std::uint64_t live_mappings_ = 0;
  // Windowed mode.
  std::uint64_t window_length_ = 1;
  std::uint32_t window_ = 0;
  std::vector<std::vector<std::uint32_t>> starting_in_window_;  // views
  std::vector<std::uint32_t> mapped_views_;
  std::vector<std::uint32_t> retiring_;
  bool shed_ = false;  // alias and offset modes: some view was unmapped under mapping pressure
  // Alias and offset modes: the end page of each stage's views; the stages mapped so far.
  std::vector<std::uint64_t> stage_pages_;
  std::uint32_t mapped_stages_ = 0;
  bool deferred_failed_ = false;  // mapping a stage failed in this iteration
  std::vector<vmm::EventHandle> retire_after_;  // retire()'s events
};

}  // namespace stalloc
