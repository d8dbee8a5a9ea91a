// The one place that decides what the runtime gives back when something is short, and in which
// order. Two kinds of asks reach it:
//
// - A part is short (Reclaimer): a packed arena about to create a chunk takes another arena's
//   idle page, or else a cached dedicated range goes where the new chunk would raise the peak;
//   a dedicated range about to be created takes the arenas' idle pages; the lender or an
//   install wants a pool run split (only with no tenant, the GPU done with it, no retiring plan
//   mapping it, and within the live mappings limit); an install wants mapping room (idle plans
//   retired, then one wait for the GPU).
// - A request failed (after_failure): the failure path, tried once per request and never by
//   matching it again: the idle pages, cached ranges and cached chunks, then the plans no tensor
//   lives in, then the views no live tensor uses, then one wait for the device so that what
//   waits to be unmapped can be. (Before it the runtime fails at once a request that cannot fit
//   beside the live tensors; after it, it may wait for frees of other threads: Runtime.)
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "src/reclaimer.h"
#include "src/runtime_parts.h"

namespace stalloc {

class RuntimeReclaimer final : public Reclaimer {
 public:
  explicit RuntimeReclaimer(const RuntimeParts& parts);

  bool chunk_for_arena(const PackedArena* asking) override;
  void bytes_for_range(std::uint64_t bytes) override;
  bool split_run(std::uint32_t head) override;
  std::uint64_t mapping_room(std::uint64_t needed) override;

  // The failure path: `serve` failed once; each step that gives something back is followed by
  // `serve` again. Returns what the first success gave, else 0.
  vmm::DevicePtr after_failure(const std::function<vmm::DevicePtr()>& serve);

  // Retires the installed plans no tensor lives in but `keep` (the plan followed stops being
  // followed if retired); true when mappings came back.
  bool retire_idle_plans(const InstalledPlan* keep);
  // Unmaps what retired plans and shed views wait for once the GPU is done with it, after a
  // device synchronisation when some is still pending; true when mappings came back.
  bool wait_for_unmaps();
  bool unmaps_pending() const;
  // Per pool run (at its first chunk): it may be split for a plan's install, no tenant in it,
  // none of its chunks in `held`.
  std::vector<bool> splittable_runs(const std::vector<bool>& held) const;

 private:
  // Chunk mappings a plan installed now may hold: the live mappings limit less what is mapped
  // already and RuntimePolicy::unplanned_mapping_share for the unplanned paths.
  std::uint64_t plan_mapping_room() const;
  // The live mappings limit (max_mappings, else the driver's; 0: none known).
  std::uint64_t mapping_limit() const;
  // Unmaps installed plans' views that no live tensor uses; returns the mappings freed.
  std::uint64_t shed_plan_views();
  // Unmaps what the GPU is done with; true when live mappings fell below `before`.
  bool unmap_completed(std::uint64_t before);

  const RuntimeParts parts_;
  // By pool run (its first chunk): the iteration (+1) in which its split was refused.
  std::vector<std::uint64_t> split_refused_;
  std::uint64_t split_wait_iteration_ = 0;  // the iteration (+1) that waited for a split
};

}  // namespace stalloc
