#include "src/plan_follower.h"

#include <algorithm>

namespace stalloc {

PlanFollower::PlanFollower(const RuntimeConfig& config, std::uint64_t granularity, PlanPool& pool,
                           StreamSync& sync, IdleChunkLender& lender, PlanCache& cache,
                           RuntimeStats& stats)
    : config_(config),
      granularity_(granularity),
      pool_(pool),
      sync_(sync),
      lender_(lender),
      cache_(cache),
      stats_(stats) {}

std::size_t PlanFollower::match(const InstalledPlan& plan, std::uint64_t size,
                                std::uint32_t stream) const {
  const std::vector<PlannedSlot>& slots = plan.plan().slots;
  if (cursor_ < slots.size() && slots[cursor_].stream == stream) {
    // The next slot takes the request when it is its size, or when it fits a slot whose size
    // varies (planned at the largest seen: MoE routing, sequence lengths) or that grows
    // (Dynamic).
    const PlannedSlot& next = slots[cursor_];
    if (size == next.size || next.kind == SlotKind::Dynamic ||
        (size < next.size && plan.varies(cursor_))) {
      return cursor_;
    }
  }
  // The last request missed the fixed slot at the cursor: if this one is the next slot's, the
  // last one stood for that slot with another size.
  if (missed_at_ == cursor_ && cursor_ + 1 < slots.size() && slots[cursor_ + 1].stream == stream) {
    const PlannedSlot& after = slots[cursor_ + 1];
    if (size == after.size || after.kind == SlotKind::Dynamic ||
        (size < after.size && plan.varies(cursor_ + 1))) {
      return cursor_ + 1;
    }
  }
  // Resynchronise after a request the plan does not have: a slot stepped over for it, of
  // exactly this size (first, or a slot ahead of the same size would take this request and
  // leave every slot between unused); after one the plan lacks: the first slot ahead with
  // exactly this size.
  for (std::size_t k : skipped_) {
    if (k < cursor_ && slots[k].size == size && slots[k].stream == stream && !plan.slot(k).live) {
      return k;
    }
  }
  // Not over slots of more than jump_bytes_per_byte times the request's bytes. Either error
  // strands bytes: a jump taken wrongly (the request is the cursor slot's tensor with a new
  // size) leaves the slots between behind, and the requests that come for them jump again; a
  // miss taken wrongly (those slots' requests did not come) packs only the request. Small sizes
  // recur (offsets of packed sequences, bias and norm tensors), so an equal size ahead tells
  // little.
  const std::size_t last = std::min(slots.size(), cursor_ + config_.lookahead + 1);
  std::uint64_t stepped_over = 0;
  for (std::size_t k = cursor_ + 1; k < last; ++k) {
    stepped_over += slots[k - 1].size;
    if (stepped_over / config_.policy.jump_bytes_per_byte > size) break;
    if (slots[k].size == size && slots[k].stream == stream) return k;
  }
  return SIZE_MAX;
}

// Early in an iteration the plan chosen by prediction may be the wrong one (variable sequence
// lengths): take the installed plan whose slot at this position is the request, exactly, or
// else the one with the most chunks whose slot there fits it (a Dynamic slot, or a varying one
// at least as large).
void PlanFollower::switch_plan(std::uint64_t size, std::uint32_t stream) {
  if (allocs_in_iteration_ > config_.lookahead) return;
  const std::size_t at = allocs_in_iteration_;
  InstalledPlan* fitting = nullptr;
  for (const auto& p : cache_.installed()) {
    if (p.get() == active_ || cache_.disowned(*p)) continue;
    const auto& slots = p->plan().slots;
    if (at >= slots.size() || slots[at].stream != stream) continue;
    if (slots[at].size == size) {
      fitting = p.get();
      break;
    }
    const bool fits = slots[at].kind == SlotKind::Dynamic ||
                      (slots[at].size >= size && p->varies(at));
    if (!fits) continue;
    if (fitting == nullptr || p->plan().num_chunks > fitting->plan().num_chunks) fitting = p.get();
  }
  if (fitting == nullptr) return;
  active_ = fitting;
  active_->last_used = cache_.next_stamp();
  active_->restart_windows();
  cursor_ = at;
  // The new plan's first `at` slots stand for the requests made so far.
  slots_taken_in_iteration_ = at;
  taken_slot_bytes_in_iteration_ = 0;
  for (std::size_t k = 0; k < at; ++k) {
    taken_slot_bytes_in_iteration_ += active_->plan().slots[k].size;
  }
  misses_in_iteration_ = 0;
  missed_bytes_in_iteration_ = 0;
}

vmm::DevicePtr PlanFollower::serve(std::uint64_t size, std::uint32_t stream, std::size_t* slot,
                                   std::span<const std::uint32_t>* budget) {
  *slot = SIZE_MAX;
  vmm::DevicePtr p = 0;
  if (active_ != nullptr || !cache_.installed().empty()) {
    p = serve_planned(size, stream, slot, budget);
  } else {
    ++stats_.unplanned;
  }
  ++allocs_in_iteration_;
  return p;
}

// A request larger than the largest its varying slot has seen is still that slot's ordinal:
// step over the slot, so that the next request meets its own.
//
// A slot the plan saw fixed that meets another size may have changed (MoE routing) or the
// request may be one the plan lacks (an extra tensor). Left in place after a run of changed
// sizes, the cursor would meet every later request with this slot, and past the lookahead
// nothing would match again. Stepped over for an extra request, the next request, the slot's
// own, would meet the slot after its own and take it if it fits, and so on down the plan. So a
// first miss on a fixed slot stays; a second in a row on the same slot means the sizes changed,
// and both slots are stepped over (the next request's own slot is the one after them). Slots
// stepped over wrongly are found again among the skipped.
void PlanFollower::step_over_miss(std::uint64_t size, std::uint32_t stream) {
  const std::vector<PlannedSlot>& slots = active_->plan().slots;
  auto step_over = [&] {
    skipped_[skipped_next_++ % skipped_.size()] = cursor_;
    ++cursor_;
  };
  if (cursor_ >= slots.size() || slots[cursor_].stream != stream) return;
  if (active_->varies(cursor_)) {
    if (size > slots[cursor_].size) step_over();
  } else if (slots[cursor_].kind != SlotKind::Dynamic &&
             misses_in_iteration_ <= slots_taken_in_iteration_) {
    if (missed_at_ == cursor_) {
      step_over();
      if (cursor_ < slots.size() && slots[cursor_].stream == stream) step_over();
      missed_at_ = SIZE_MAX;
    } else {
      missed_at_ = cursor_;
    }
  }
}

vmm::DevicePtr PlanFollower::serve_planned(std::uint64_t size, std::uint32_t stream,
                                           std::size_t* slot_index,
                                           std::span<const std::uint32_t>* budget) {
  std::size_t k = active_ != nullptr ? match(*active_, size, stream) : SIZE_MAX;
  if (k == SIZE_MAX) {
    switch_plan(size, stream);
    if (active_ != nullptr) k = match(*active_, size, stream);
  }
  if (k == SIZE_MAX) {
    if (active_ != nullptr) {
      ++stats_.misses;
      ++misses_in_iteration_;
      missed_bytes_in_iteration_ += size;
      step_over_miss(size, stream);
    } else {
      ++stats_.unplanned;
    }
    return 0;
  }
  if (k < cursor_) {
    std::replace(skipped_.begin(), skipped_.end(), k, SIZE_MAX);
  } else {
    if (missed_at_ == cursor_ && k > cursor_) skipped_[skipped_next_++ % skipped_.size()] = cursor_;
    cursor_ = k + 1;
  }
  missed_at_ = SIZE_MAX;
  ++slots_taken_in_iteration_;
  const PlannedSlot& planned = active_->plan().slots[k];
  taken_slot_bytes_in_iteration_ += planned.size;
  active_->advance_to(planned.start);
  SlotState& slot = active_->slot(k);
  StreamMask sync_with = 0;
  StreamSync::FreeStamp freed = StreamSync::kUnstamped;
  bool occupied = false;
  if (planned.kind == SlotKind::Dynamic && !slot.live) {
    const std::uint64_t starts = active_->dynamic_starts(k, size);
    if (starts == 0) {
      // Longer than the budget its range is mapped on: packed on that budget instead.
      ++stats_.matches;
      *budget = planned.budget_chunks;
      return 0;
    }
    // The first start whose bytes are free (another Dynamic tensor may hold the first pages
    // of an overlapping budget); else the first, if parked chunks are all that is in the way.
    for (std::uint64_t start = 0; start < starts && !occupied; ++start) {
      active_->fit_dynamic(k, size, start);
      occupied = pool_.try_occupy(slot.footprint, &sync_with, &freed);
    }
    if (!occupied) active_->fit_dynamic(k, size, 0);
  } else if (!slot.live) {
    occupied = pool_.try_occupy(slot.footprint, &sync_with, &freed);
  }
  // A chunk lent to a packed arena and parked there comes back at once when the slot wants it.
  if (!occupied) {
    conflict_pieces_.clear();
    slot.footprint.append_pieces(granularity_, &conflict_pieces_);
  }
  if (!occupied && (slot.live || !(lender_.reclaim(conflict_pieces_) &&
                                   pool_.try_occupy(slot.footprint, &sync_with, &freed)))) {
    lender_.want(conflict_pieces_);
    ++stats_.conflicts;
    return 0;
  }
  if (!active_->ensure_mapped(k, misses_in_iteration_ <= slots_taken_in_iteration_) ||
      !sync_.order_after(sync_with, stream, freed)) {
    // The chunks keep the streams the slot would have waited for.
    pool_.vacate(slot.footprint, sync_with, freed);
    ++stats_.conflicts;
    return 0;
  }
  slot.live = true;
  slot.tenant_stream = stream;
  slot.used_by = StreamSync::bit(stream);
  active_->on_occupied(k);
  ++stats_.matches;
  *slot_index = k;
  return active_->address(k);
}

void PlanFollower::occupy(std::size_t slot, vmm::DevicePtr address, std::uint64_t id,
                          std::uint64_t size) {
  active_->slot(slot).tenant_id = id;
  active_->slot(slot).tenant_size = size;
  live_.insert(address, {active_, static_cast<std::uint32_t>(slot)});
}

bool PlanFollower::free(vmm::DevicePtr address, Freed* freed) {
  const LiveSlot live = live_.take(address);
  if (live.plan == nullptr) return false;
  SlotState& slot = live.plan->slot(live.slot);
  pool_.vacate(slot.footprint, slot.used_by, sync_.now());
  sync_.note_free(slot.used_by);
  slot.live = false;
  live.plan->on_vacated(live.slot);
  *freed = {slot.tenant_id, slot.tenant_size, slot.tenant_stream};
  return true;
}

bool PlanFollower::record_stream(vmm::DevicePtr address, StreamMask stream) {
  const LiveSlot live = live_.find(address);
  if (live.plan == nullptr) return false;
  live.plan->slot(live.slot).used_by |= stream;
  return true;
}

void PlanFollower::start_iteration(InstalledPlan* plan) {
  active_ = plan;
  cursor_ = 0;
  missed_at_ = SIZE_MAX;
  skipped_.fill(SIZE_MAX);
  allocs_in_iteration_ = 0;
  misses_in_iteration_ = 0;
  slots_taken_in_iteration_ = 0;
  missed_bytes_in_iteration_ = 0;
  taken_slot_bytes_in_iteration_ = 0;
  lend_any_ = false;
}

void PlanFollower::allow_lending(IdleChunkLender& lender,
                                 std::span<const std::uint32_t> budget) const {
  if (active_ == nullptr || lend_any_) {
    lender.lend_any();
  } else {
    lender.lend_done(budget, active_->chunks_done_before(cursor_),
                     static_cast<std::uint32_t>(active_->plan().num_chunks));
  }
}

std::uint64_t PlanFollower::slots_not_taken() const {
  const std::uint64_t slots = active_->slot_count();
  return slots - std::min(slots, slots_taken_in_iteration_);
}

std::uint64_t PlanFollower::off_plan_requests() const {
  return misses_in_iteration_ + slots_not_taken();
}

std::uint64_t PlanFollower::off_plan_bytes() const {
  std::uint64_t planned = 0;
  for (const PlannedSlot& s : active_->plan().slots) planned += s.size;
  return missed_bytes_in_iteration_ +
         (planned - std::min(planned, taken_slot_bytes_in_iteration_));
}

bool PlanFollower::served_by_active() const {
  if (active_ == nullptr) return false;
  const std::uint64_t share = config_.policy.off_plan_share;
  const std::uint64_t slots = active_->slot_count();
  if (off_plan_requests() * share <= slots) return true;
  const std::uint64_t pool_bytes = active_->plan().num_chunks * granularity_;
  return slots >= share && off_plan_bytes() * share <= pool_bytes;
}

}  // namespace stalloc
