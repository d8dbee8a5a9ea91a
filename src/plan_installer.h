// A plan made live: every planned slot gets a virtual range inside one reservation per plan,
// backed by the pool chunks the plan names (each chunk mapped separately, cuMemUnmap cannot
// split a mapping; access set once per slot range). Alias mode maps everything at install, so a
// steady iteration makes no VMM call. Windowed mode maps a slot's range when the iteration
// reaches the first window of its lifetime and unmaps it lazily after it: events recorded on
// the streams that used it must have completed, which is only ever queried, never waited for.
//
// Slots of kind Dynamic get no range: they are served by the dynamic arena, on their budget
// chunks where those are idle.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "planner/chunk_plan.h"
#include "src/plan_pool.h"
#include "src/stream_sync.h"
#include "vmm/driver.h"

namespace stalloc {

struct SlotState {
  vmm::DevicePtr range = 0;        // base of the slot's range (0 for a Dynamic slot)
  std::vector<ChunkPiece> pieces;  // the bytes it occupies in the pool, chunk by chunk
  bool live = false;
  std::uint64_t tenant_id = 0;     // the live tenant's request id (recorder)
  std::uint32_t tenant_stream = 0;
  StreamMask used_by = 0;          // streams of the live tenant (record_stream adds to it)
  bool mapped = false;
  std::vector<vmm::EventHandle> unmap_after;  // windowed: pending lazy unmap
  std::uint32_t first_window = 0;
  std::uint32_t last_window = 0;
};

class InstalledPlan {
 public:
  // Validates the plan against the pool's granularity, grows the pool and maps (alias mode).
  // Returns nullptr with *why on any failure, leaving nothing behind.
  static std::unique_ptr<InstalledPlan> install(ChunkPlan plan, vmm::Driver& driver,
                                                PlanPool& pool, StreamSync& sync,
                                                std::string* why);
  ~InstalledPlan();
  InstalledPlan(const InstalledPlan&) = delete;
  InstalledPlan& operator=(const InstalledPlan&) = delete;

  const ChunkPlan& plan() const { return plan_; }
  std::size_t slot_count() const { return slots_.size(); }
  SlotState& slot(std::size_t index) { return slots_[index]; }
  const SlotState& slot(std::size_t index) const { return slots_[index]; }
  vmm::DevicePtr address(std::size_t index) const {
    return slots_[index].range + plan_.slots[index].offset;
  }

  bool contains(vmm::DevicePtr p) const { return p - base_ < bytes_; }
  // The slot whose range holds p (p inside this plan's reservation).
  std::uint32_t slot_at(vmm::DevicePtr p) const { return page_slot_[(p - base_) / granularity_]; }

  // Windowed mode: the iteration reached the window of plan time `time`; maps the slots whose
  // lifetime starts by then, retires those that are over, and unmaps retired ones whose events
  // completed. Alias mode: nothing to do.
  bool advance_to(std::uint64_t time);
  // Called at each iteration start.
  void restart_windows();
  // Makes sure a slot about to be handed out is mapped. False when the driver refused.
  bool ensure_mapped(std::size_t index);

  bool idle() const { return live_slots_ == 0; }
  void on_occupied() { ++live_slots_; }
  void on_vacated() { --live_slots_; }
  std::uint64_t last_used = 0;  // plan cache LRU stamp

 private:
  InstalledPlan(ChunkPlan plan, vmm::Driver& driver, PlanPool& pool, StreamSync& sync);
  bool map_slot(SlotState& s);
  void unmap_slot(SlotState& s);
  void enter_window(std::uint32_t window);

  ChunkPlan plan_;
  vmm::Driver& driver_;
  PlanPool& pool_;
  StreamSync& sync_;
  std::uint64_t granularity_;
  vmm::DevicePtr base_ = 0;
  std::uint64_t bytes_ = 0;
  std::vector<SlotState> slots_;
  std::vector<std::uint32_t> page_slot_;
  std::uint64_t live_slots_ = 0;
  // Windowed mode.
  std::uint64_t window_length_ = 1;
  std::uint32_t window_ = 0;
  std::vector<std::vector<std::uint32_t>> starting_in_window_;
  std::vector<std::uint32_t> mapped_slots_;
  std::vector<std::uint32_t> retiring_;
};

}  // namespace stalloc
