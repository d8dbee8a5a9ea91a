// The matching state of one iteration: which installed plan is followed, where its cursor is,
// and what the iteration took of it. Each request is matched to the next planned slot (ordinal,
// size, stream), with a look-ahead to resynchronise after a request the plan does not have and
// a short list of slots stepped over that may still be taken; early in an iteration another
// installed plan whose slot at this position is the request may take over (switch_plan).
//
// Serving a matched slot is a comparison, an occupancy check on the slot's chunks and a few
// stores: no chunk is created here, and mapping happens only for views installed unmapped. A
// slot whose chunks are still occupied (a conflict) or that a Dynamic tensor outgrows is left to
// the unplanned path.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "src/idle_chunk_lender.h"
#include "src/live_slot_table.h"
#include "src/plan_cache.h"
#include "src/plan_pool.h"
#include "src/runtime_config.h"
#include "src/runtime_stats.h"
#include "src/stream_sync.h"

namespace stalloc {

class PlanFollower {
 public:
  PlanFollower(const RuntimeConfig& config, std::uint64_t granularity, PlanPool& pool,
               StreamSync& sync, IdleChunkLender& lender, PlanCache& cache, RuntimeStats& stats);

  // The request's address in its matched slot, or 0 to serve it unplanned; *slot is the slot
  // (SIZE_MAX: none) and *budget, when it matched a Dynamic slot it outgrows, that slot's
  // budget chunks to pack it on. Counts the request in this iteration either way.
  vmm::DevicePtr serve(std::uint64_t size, std::uint32_t stream, std::size_t* slot,
                       std::span<const std::uint32_t>* budget);
  // The tensor `id` of `size` now lives at `address` in slot `slot` of the followed plan.
  void occupy(std::size_t slot, vmm::DevicePtr address, std::uint64_t id, std::uint64_t size);
  struct Freed {
    std::uint64_t id = 0;
    std::uint64_t size = 0;
    std::uint32_t stream = 0;
  };
  // Frees a tensor that lives in a planned slot (of any installed plan); false when `address`
  // is none.
  bool free(vmm::DevicePtr address, Freed* freed);
  bool holds(vmm::DevicePtr address) const { return live_.find(address).plan != nullptr; }
  // Adds `stream` to the users of a tensor in a planned slot; false when `address` is none.
  bool record_stream(vmm::DevicePtr address, StreamMask stream);

  // Starts an iteration following `plan` (null: none) from its first slot.
  void start_iteration(InstalledPlan* plan);
  // No plan is followed from here on (it was retired, or the iteration ended).
  void stop_following() { active_ = nullptr; }
  InstalledPlan* active() const { return active_; }
  std::uint64_t requests() const { return allocs_in_iteration_; }

  // This iteration outgrew what the followed plan leaves idle and the most ever held: any idle
  // pool chunk may be lent to the unplanned path from now on.
  void lend_any_from_now() { lend_any_ = true; }
  // What the lender may lend to a request this iteration serves unplanned (`budget`: the
  // Dynamic slot's chunks it matched, else empty).
  void allow_lending(IdleChunkLender& lender, std::span<const std::uint32_t> budget) const;

  // Requests of this iteration no slot of the followed plan took, plus its slots no request
  // took, and their bytes.
  std::uint64_t slots_not_taken() const;
  std::uint64_t off_plan_requests() const;
  std::uint64_t off_plan_bytes() const;
  std::uint64_t misses() const { return misses_in_iteration_; }
  // The iteration followed its plan closely enough to count as the plan's
  // (RuntimePolicy::off_plan_share).
  bool served_by_active() const;

 private:
  std::size_t match(const InstalledPlan& plan, std::uint64_t size, std::uint32_t stream) const;
  void switch_plan(std::uint64_t size, std::uint32_t stream);
  vmm::DevicePtr serve_planned(std::uint64_t size, std::uint32_t stream, std::size_t* slot,
                               std::span<const std::uint32_t>* budget);
  void step_over_miss(std::uint64_t size, std::uint32_t stream);

  const RuntimeConfig& config_;
  const std::uint64_t granularity_;
  PlanPool& pool_;
  StreamSync& sync_;
  IdleChunkLender& lender_;
  PlanCache& cache_;
  RuntimeStats& stats_;
  LiveSlotTable live_;
  std::vector<ChunkPiece> conflict_pieces_;  // a slot's footprint, for the lender

  InstalledPlan* active_ = nullptr;
  std::size_t cursor_ = 0;  // next slot expected
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
  bool lend_any_ = false;
};

}  // namespace stalloc
