#include "src/runtime_reclaimer.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace stalloc {

RuntimeReclaimer::RuntimeReclaimer(const RuntimeParts& parts)
    : parts_(parts) {}

bool RuntimeReclaimer::chunk_for_arena(const PackedArena* asking) {
  if (parts_.unplanned.give_idle_page_to(asking)) return true;
  // No idle page anywhere: above the most ever held, a cached dedicated range goes instead, so
  // that the chunk the arena now creates does not raise the peak.
  if (parts_.memory.reserved_bytes() + parts_.granularity > parts_.memory.high_water_bytes()) {
    parts_.unplanned.dedicated().release_for(parts_.granularity);
  }
  return false;
}

void RuntimeReclaimer::bytes_for_range(std::uint64_t bytes) {
  // The arenas' idle pages go, their chunks released with the cached ones.
  parts_.unplanned.give_idle_pages(bytes);
  parts_.memory.trim();
}

vmm::DevicePtr RuntimeReclaimer::after_failure(const std::function<vmm::DevicePtr()>& serve) {
  vmm::DevicePtr p = 0;
  // What the arenas kept mapped for reuse, the cached ranges, and the chunks cached for reuse
  // (a chunk of one size cannot back a range of another).
  const bool released = parts_.unplanned.release_idle() > 0;
  const bool cached = parts_.memory.cached_bytes() > 0;
  parts_.memory.trim();
  if (released || cached) p = serve();
  // Then the mappings of plans no tensor lives in, the one followed included: this iteration is
  // served dynamically from here on rather than fail while memory is free.
  if (p == 0 && retire_idle_plans(nullptr)) p = serve();
  // Then the views of installed plans that no live tensor uses (mapped again when wanted).
  if (p == 0 && shed_plan_views() > 0) p = serve();
  // What was retired or shed may wait for GPU work: a failure waits for it, as PyTorch's
  // allocator synchronizes before it raises.
  if (p == 0 && wait_for_unmaps()) p = serve();
  return p;
}

std::uint64_t RuntimeReclaimer::mapping_limit() const {
  return parts_.config.max_mappings != 0 ? parts_.config.max_mappings : parts_.driver.mapping_limit();
}

std::uint64_t RuntimeReclaimer::plan_mapping_room() const {
  const std::uint64_t limit = mapping_limit();
  if (limit == 0) return std::numeric_limits<std::uint64_t>::max();
  // A share stays for what is served beside the plans (arenas, dedicated ranges), on top of
  // what they hold now and what plans installed unmapped will map.
  std::uint64_t held = parts_.driver.counters().live_mappings + limit / parts_.config.policy.unplanned_mapping_share;
  for (const auto& p : parts_.cache.installed()) held += p->deferred_pages();
  return held < limit ? limit - held : 0;
}

std::uint64_t RuntimeReclaimer::mapping_room(std::uint64_t needed) {
  const std::uint64_t room = plan_mapping_room();
  if (room >= needed) return room;
  // At a boundary the GPU may still run the last iteration's work on the retired views: the
  // install waits a little for it rather than fall back to a mode that maps more per iteration.
  if (!retire_idle_plans(parts_.follower.active()) && !wait_for_unmaps()) return room;
  return plan_mapping_room();
}

std::uint64_t RuntimeReclaimer::shed_plan_views() {
  const std::uint64_t wanted =
      std::max<std::uint64_t>(mapping_limit() / parts_.config.policy.shed_mapping_share, 1);
  std::uint64_t freed = 0;
  for (const auto& plan : parts_.cache.installed()) {
    if (freed >= wanted) break;
    freed += plan->shed_idle_views(wanted - freed);
  }
  if (freed > 0) parts_.log("stalloc runtime: " + std::to_string(freed) + " chunk mappings of plan views shed");
  return freed;
}

bool RuntimeReclaimer::unmap_completed(std::uint64_t before) {
  parts_.cache.release_retired();
  for (const auto& plan : parts_.cache.installed()) plan->unmap_completed();
  parts_.unplanned.poll();
  return parts_.driver.counters().live_mappings < before;
}

bool RuntimeReclaimer::unmaps_pending() const {
  return parts_.cache.retiring() > 0 ||
         std::any_of(parts_.cache.installed().begin(), parts_.cache.installed().end(),
                     [](const auto& plan) { return plan->unmaps_pending(); }) ||
         parts_.unplanned.unmaps_pending();
}

// As PyTorch's allocator before it raises out of memory: one wait for the device, which then
// has run every kernel that could still use what waits to be unmapped.
bool RuntimeReclaimer::wait_for_unmaps() {
  const std::uint64_t before = parts_.driver.counters().live_mappings;
  if (unmap_completed(before)) return true;
  if (!unmaps_pending() || parts_.driver.synchronize() != vmm::Status::Success) return false;
  return unmap_completed(before);
}

bool RuntimeReclaimer::retire_idle_plans(const InstalledPlan* keep) {
  const std::uint64_t before = parts_.driver.counters().live_mappings;
  parts_.cache.retire_idle(keep);
  if (parts_.follower.active() != nullptr && !parts_.cache.holds(parts_.follower.active())) {
    parts_.follower.stop_following();
    // What the lender was told it may lend named the retired plan's chunks, which go now:
    // with no plan followed, any idle chunk (a retired plan that held no mapping frees none,
    // and the failure path goes on to its next step with this request's lender).
    parts_.unplanned.lender().lend_any();
  }
  parts_.cache.release_retired();
  const std::uint64_t after = parts_.driver.counters().live_mappings;
  if (after < before) {
    parts_.log("stalloc runtime: idle plans retired for " + std::to_string(before - after) +
         " chunk mappings");
  }
  return after < before;
}

std::vector<bool> RuntimeReclaimer::splittable_runs(const std::vector<bool>& held) const {
  std::vector<bool> splittable(parts_.pool.size(), false);
  for (std::uint32_t head = 0; head < parts_.pool.size(); head += parts_.pool.run_length(head)) {
    const std::uint32_t length = parts_.pool.run_length(head);
    bool free = length > 1 && parts_.pool.run_idle(head);
    for (std::uint32_t k = 0; free && k < length; ++k) free = !(head + k < held.size() && held[head + k]);
    splittable[head] = free;
  }
  return splittable;
}

bool RuntimeReclaimer::split_run(std::uint32_t head) {
  const std::uint32_t length = parts_.pool.run_length(head);
  if (length < 2) return true;
  // Asked again in the same iteration (the lender visits every idle chunk), a refusal for the
  // GPU's work, a retiring plan or the mappings limit stands: asking costs event calls.
  const std::uint64_t stamp = parts_.stats.iterations + 1;
  if (head < split_refused_.size() && split_refused_[head] == stamp) return false;
  auto refuse = [&] {
    if (split_refused_.size() < parts_.pool.size()) split_refused_.resize(parts_.pool.size(), 0);
    split_refused_[head] = stamp;
    return false;
  };
  // Tenants come and go (asked again, it may be free): no refusal kept for them.
  if (!parts_.pool.run_idle(head)) return false;
  if (parts_.cache.retiring_maps(head)) return refuse();
  // Its former tenants' kernels may still run on it: its mappings go only once they are done.
  // Lent a chunk at a time, as the runs' chunks were, the arenas would be ordered after them on
  // their streams; a run must be unmapped, so while the GPU runs behind the host waits for the
  // device, once in an iteration, as PyTorch's allocator does before it frees cached blocks
  // (without it, under GPU lag no run could be split and the next plan grew the pool beside
  // them).
  if (const StreamMask users = parts_.pool.run_users(head); users != 0) {
    std::vector<vmm::EventHandle> done;
    const bool ok = parts_.sync.record(users, &done) && parts_.sync.completed(&done);
    parts_.sync.discard(&done);
    if (!ok) {
      if (split_wait_iteration_ == stamp || parts_.driver.synchronize() != vmm::Status::Success) {
        return refuse();
      }
      split_wait_iteration_ = stamp;
      ++parts_.stats.split_waits;
      parts_.pool.forget_users();
    }
  }
  std::vector<std::pair<InstalledPlan*, std::vector<InstalledPlan::RunPlace>>> at;
  std::uint64_t places = 0;
  for (const auto& plan : parts_.cache.installed()) {
    std::vector<InstalledPlan::RunPlace> p = plan->run_places(head);
    places += p.size();
    if (!p.empty()) at.emplace_back(plan.get(), std::move(p));
  }
  // Each place maps the run's chunks one by one then: within the live mappings limit.
  const std::uint64_t limit = mapping_limit();
  if (limit != 0 && parts_.driver.counters().live_mappings + places * (length - 1) > limit) {
    return refuse();
  }
  for (auto& [plan, p] : at) plan->unmap_run(p);
  const bool split = parts_.pool.split_run(head);
  for (auto& [plan, p] : at) plan->map_run_again(head, length, p);
  if (!split) return refuse();
  ++parts_.stats.runs_split;
  return true;
}

}  // namespace stalloc
