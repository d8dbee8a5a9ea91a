// What the runtime's parts ask of the runtime when they are short of memory or mappings.
//
// A packed arena, a dedicated range, the lender and a plan's install each hold only their own
// memory; what else may be given back (another arena's idle page, a cached range, a plan no
// tensor lives in, a pool run unmapped from the plans that map it) only the runtime knows. The
// parts ask through this interface, and the runtime answers in one place
// (runtime_reclaimer.h), where the order of the steps is written once.
#pragma once

#include <cstdint>

namespace stalloc {

class PackedArena;

class Reclaimer {
 public:
  // `asking` must create a chunk: put an idle chunk held elsewhere into PhysicalMemory's cache
  // instead. True when one is there.
  virtual bool chunk_for_arena(const PackedArena* asking) = 0;
  // A dedicated range must be created beyond what its cache released: release up to `bytes`
  // held idle elsewhere, so that the new chunk does not add to what is held.
  virtual void bytes_for_range(std::uint64_t bytes) = 0;
  // Make the plan pool's run that starts at `head` chunks alone (PlanPool::split_run), unmapping
  // first whatever maps it; false when it cannot be.
  virtual bool split_run(std::uint32_t head) = 0;
  // A plan's install needs `needed` live mappings: how many it may hold, after making room.
  virtual std::uint64_t mapping_room(std::uint64_t needed) = 0;

 protected:
  ~Reclaimer() = default;
};

// For a part used alone: nothing is held elsewhere, no run is split, mappings are unlimited.
class NoReclaimer final : public Reclaimer {
 public:
  bool chunk_for_arena(const PackedArena*) override { return false; }
  void bytes_for_range(std::uint64_t) override {}
  bool split_run(std::uint32_t) override { return false; }
  std::uint64_t mapping_room(std::uint64_t) override { return UINT64_MAX; }
};

// The one NoReclaimer the parts default to.
Reclaimer& no_reclaimer();

}  // namespace stalloc
