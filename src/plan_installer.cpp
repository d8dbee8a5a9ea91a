#include "src/plan_installer.h"

#include <algorithm>

namespace stalloc {
namespace {

std::string check_plan(const ChunkPlan& plan, std::uint64_t granularity) {
  if (plan.mode != PlanMode::Alias && plan.mode != PlanMode::Windowed) {
    return "plan mode " + std::string(plan_mode_name(plan.mode)) +
           " cannot be installed (alias or windowed)";
  }
  if (plan.granularity != granularity) {
    return "plan granularity " + std::to_string(plan.granularity) +
           " differs from the driver's " + std::to_string(granularity);
  }
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    const PlannedSlot& s = plan.slots[i];
    const std::string where = "plan slot " + std::to_string(i) + ": ";
    if (i > 0 && s.ordinal <= plan.slots[i - 1].ordinal) {
      return where + "ordinal " + std::to_string(s.ordinal) + " out of order";
    }
    if (s.kind == SlotKind::Dynamic) continue;
    if (s.offset >= granularity) return where + "offset not below the granularity";
    if (s.size == 0) return where + "size 0";
    if (s.chunks.size() != (s.offset + s.size + granularity - 1) / granularity) {
      return where + "chunk count does not cover offset + size";
    }
    for (std::uint32_t c : s.chunks) {
      if (c >= plan.num_chunks) return where + "chunk " + std::to_string(c) + " outside the pool";
    }
  }
  return {};
}

}  // namespace

InstalledPlan::InstalledPlan(ChunkPlan plan, vmm::Driver& driver, PlanPool& pool,
                             StreamSync& sync)
    : plan_(std::move(plan)),
      driver_(driver),
      pool_(pool),
      sync_(sync),
      granularity_(plan_.granularity) {}

std::unique_ptr<InstalledPlan> InstalledPlan::install(ChunkPlan plan, vmm::Driver& driver,
                                                      PlanPool& pool, StreamSync& sync,
                                                      std::string* why) {
  std::size_t g = 0;
  if (driver.granularity(&g) != vmm::Status::Success) {
    *why = "driver granularity unavailable";
    return nullptr;
  }
  if (std::string problem = check_plan(plan, g); !problem.empty()) {
    *why = problem;
    return nullptr;
  }
  if (!pool.grow_to(plan.num_chunks)) {
    *why = "cannot create the plan pool of " + std::to_string(plan.num_chunks) + " chunks";
    return nullptr;
  }
  std::unique_ptr<InstalledPlan> p(new InstalledPlan(std::move(plan), driver, pool, sync));
  const ChunkPlan& cp = p->plan_;
  std::uint64_t pages = 0;
  for (const PlannedSlot& s : cp.slots) {
    if (s.kind != SlotKind::Dynamic) pages += s.chunks.size();
  }
  p->bytes_ = pages * g;
  if (pages > 0) {
    vmm::Status st = driver.reserve(&p->base_, p->bytes_);
    if (st != vmm::Status::Success) {
      *why = "cannot reserve " + std::to_string(p->bytes_) + " bytes of address space: " +
             std::string(vmm::status_name(st));
      p->bytes_ = 0;
      return nullptr;
    }
  }
  p->slots_.resize(cp.slots.size());
  p->page_slot_.reserve(pages);
  std::uint64_t requests = std::max<std::uint64_t>(cp.signature.requests, 1);
  std::uint32_t windows = cp.mode == PlanMode::Windowed ? std::max<std::uint32_t>(cp.windows, 1) : 1;
  p->window_length_ = (requests + windows - 1) / windows;
  p->starting_in_window_.resize(windows);
  vmm::DevicePtr next = p->base_;
  for (std::size_t i = 0; i < cp.slots.size(); ++i) {
    const PlannedSlot& s = cp.slots[i];
    SlotState& st = p->slots_[i];
    if (s.kind == SlotKind::Dynamic) continue;
    st.range = next;
    next += s.chunks.size() * g;
    for (std::size_t j = 0; j < s.chunks.size(); ++j) {
      std::uint64_t page_lo = j * g;
      std::uint64_t lo = std::max(s.offset, page_lo) - page_lo;
      std::uint64_t hi = std::min(s.offset + s.size, page_lo + g) - page_lo;
      st.pieces.push_back({s.chunks[j], static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(hi)});
      p->page_slot_.push_back(static_cast<std::uint32_t>(i));
    }
    std::uint64_t end = std::max(s.end, s.start + 1);
    st.first_window = static_cast<std::uint32_t>(std::min<std::uint64_t>(s.start / p->window_length_, windows - 1));
    st.last_window = static_cast<std::uint32_t>(std::min<std::uint64_t>((end - 1) / p->window_length_, windows - 1));
    p->starting_in_window_[st.first_window].push_back(static_cast<std::uint32_t>(i));
  }
  if (cp.mode == PlanMode::Alias) {
    for (std::size_t i = 0; i < cp.slots.size(); ++i) {
      if (cp.slots[i].kind == SlotKind::Dynamic) continue;
      if (!p->map_slot(p->slots_[i])) {
        *why = "mapping the plan failed after " + std::to_string(i) + " of " +
               std::to_string(cp.slots.size()) + " slots (live mappings limit?)";
        return nullptr;
      }
    }
  }
  return p;
}

InstalledPlan::~InstalledPlan() {
  for (SlotState& s : slots_) {
    if (s.mapped) unmap_slot(s);
    sync_.discard(&s.unmap_after);
  }
  if (bytes_ > 0) driver_.free_reservation(base_, bytes_);
}

bool InstalledPlan::map_slot(SlotState& s) {
  std::size_t done = 0;
  for (; done < s.pieces.size(); ++done) {
    if (driver_.map(s.range + done * granularity_, granularity_, 0, pool_.handle(s.pieces[done].chunk)) !=
        vmm::Status::Success) {
      break;
    }
  }
  if (done == s.pieces.size() &&
      driver_.set_access(s.range, s.pieces.size() * granularity_, vmm::Access::ReadWrite) ==
          vmm::Status::Success) {
    s.mapped = true;
    return true;
  }
  while (done > 0) {
    --done;
    driver_.unmap(s.range + done * granularity_, granularity_);
  }
  return false;
}

void InstalledPlan::unmap_slot(SlotState& s) {
  for (std::size_t j = 0; j < s.pieces.size(); ++j) {
    driver_.unmap(s.range + j * granularity_, granularity_);
  }
  s.mapped = false;
}

bool InstalledPlan::ensure_mapped(std::size_t index) {
  SlotState& s = slots_[index];
  if (!s.unmap_after.empty()) {
    sync_.discard(&s.unmap_after);
    retiring_.erase(std::find(retiring_.begin(), retiring_.end(), static_cast<std::uint32_t>(index)));
  }
  if (s.mapped) return true;
  if (!map_slot(s)) return false;
  mapped_slots_.push_back(static_cast<std::uint32_t>(index));
  return true;
}

void InstalledPlan::restart_windows() {
  if (plan_.mode != PlanMode::Windowed) return;
  window_ = 0;
  enter_window(0);
}

bool InstalledPlan::advance_to(std::uint64_t time) {
  if (plan_.mode != PlanMode::Windowed) return true;
  auto w = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(time / window_length_, starting_in_window_.size() - 1));
  while (window_ < w) enter_window(++window_);
  return true;
}

void InstalledPlan::enter_window(std::uint32_t window) {
  // Map eagerly: a failure here is not fatal, ensure_mapped retries when the slot is handed out.
  for (std::uint32_t o : starting_in_window_[window]) ensure_mapped(o);
  // Retire what this window no longer needs.
  std::size_t kept = 0;
  for (std::uint32_t o : mapped_slots_) {
    SlotState& s = slots_[o];
    bool needed = s.live || (s.first_window <= window && window <= s.last_window);
    if (!needed && s.unmap_after.empty()) {
      if (sync_.record(s.used_by == 0 ? StreamSync::bit(plan_.slots[o].stream) : s.used_by,
                       &s.unmap_after)) {
        retiring_.push_back(o);
      } else {
        sync_.discard(&s.unmap_after);
      }
    }
    mapped_slots_[kept++] = o;
  }
  mapped_slots_.resize(kept);
  // Unmap the retired slots the GPU is done with.
  std::size_t waiting = 0;
  for (std::uint32_t o : retiring_) {
    SlotState& s = slots_[o];
    if (sync_.completed(&s.unmap_after)) {
      unmap_slot(s);
      mapped_slots_.erase(std::find(mapped_slots_.begin(), mapped_slots_.end(), o));
    } else {
      retiring_[waiting++] = o;
    }
  }
  retiring_.resize(waiting);
}

}  // namespace stalloc
