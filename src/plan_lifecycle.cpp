#include "src/plan_lifecycle.h"

#include <algorithm>

#include "common/units.h"
#include "src/chunk_relocation.h"

namespace stalloc {

PlanLifecycle::PlanLifecycle(const RuntimeParts& parts, RuntimeReclaimer& reclaimer)
    : parts_(parts), reclaimer_(reclaimer) {
  recorder_.set_timing(true);
}

void PlanLifecycle::detect_boundary(std::uint64_t size, std::uint32_t stream,
                                    std::uint64_t live_allocations) {
  const std::uint64_t dropped = detector_.dropped();
  if (detector_.boundary_before(size, stream, live_allocations)) {
    ++parts_.stats.auto_steps;
    end_iteration();
  } else if (detector_.dropped() != dropped) {
    disown_detected_iterations("the detected period of " +
                               std::to_string(detector_.period_dropped()) +
                               " allocations ended: it was part of an iteration");
  }
}

// Such as a pipeline schedule's repeated micro-batches: the program called step() after the
// detector had cut iterations (the torch extension steps from the optimizer's hook, so
// detection runs only until the first optimizer step), or the detected period ended. Plans of
// those pieces would be followed into the program's real iterations and their conflicts paid
// every iteration.
void PlanLifecycle::disown_detected_iterations(const std::string& why) {
  parts_.log("stalloc runtime: " + why + "; profiling again from the program's iterations");
  transitions_.clear();
  have_last_key_ = false;
  profile_base_ = recorder_.iteration();
  parts_.cache.disown_used();
  parts_.cache.retire_idle(nullptr);
  parts_.follower.stop_following();
}

void PlanLifecycle::note_transition(const SignatureKey& key) {
  if (have_last_key_) {
    auto it = std::find_if(transitions_.begin(), transitions_.end(), [&](const Transition& t) {
      return t.from == last_key_ && t.to == key;
    });
    if (it != transitions_.end()) {
      ++it->count;
    } else {
      // Bounded: a run whose signatures never repeat starts over rather than growing.
      if (transitions_.size() >= parts_.config.policy.transitions_kept) transitions_.clear();
      transitions_.push_back({last_key_, key, 1});
    }
  }
  last_key_ = key;
  have_last_key_ = true;
}

void PlanLifecycle::end_iteration() {
  const std::uint32_t iteration = recorder_.iteration();
  if (parts_.follower.requests() > 0) {
    SignatureKey key;
    InstalledPlan* active = parts_.follower.active();
    if (parts_.follower.served_by_active()) {
      key = key_of(active->plan().signature);
      if (const std::uint64_t off = parts_.follower.off_plan_requests(); off > 0) {
        parts_.log("stalloc runtime: iteration " + std::to_string(iteration) +
             " followed its plan of " + std::to_string(active->slot_count()) + " slots, " +
             std::to_string(off) + (off == 1 ? " request or slot" : " requests or slots") +
             " off it (" + format_bytes(parts_.follower.off_plan_bytes()) + "): not planned");
      }
    } else {
      if (active != nullptr) {
        parts_.log("stalloc runtime: iteration " + std::to_string(iteration) + " left its plan of " +
             std::to_string(active->slot_count()) + " slots: " +
             std::to_string(parts_.follower.misses()) + " requests missed, " +
             std::to_string(parts_.follower.slots_not_taken()) + " slots not taken (" +
             format_bytes(parts_.follower.off_plan_bytes()) + ")");
      }
      recorder_.compare_sizes();
      // auto: sizes that vary together (sequence lengths) are planned at their largest, so
      // that every shorter iteration fits the plan's slots with no VMM call and only one
      // longer than any seen is planned again; sizes that vary apart (MoE) get Dynamic slots.
      VaryingSizes policy = parts_.config.varying_sizes;
      Trace trace = recorder_.iteration_trace(parts_.config.varying_sizes, &policy);
      trace.device = parts_.driver.device();
      key = key_of(signature_of(trace, iteration));
      if (iteration >= profile_base_ + parts_.config.profile_iterations && !parts_.cache.known(key)) {
        PlanOptions options;
        options.mode = parts_.config.mode;
        options.granularity = parts_.granularity;
        options.windows = parts_.config.windows;
        // A one-off tensor's slot would stand between Dynamic slots that take any size, and the
        // next iteration, which does not make it, would meet each slot one early
        // (slot_classifier.h). Plans at the largest sizes keep it: without, plans of lengths
        // in random order held less.
        options.plan_one_offs = policy != VaryingSizes::Dynamic;
        // Serial: the planner runs beside training and must not take every core from it.
        options.dsa.parallel = false;
        parts_.cache.start_planning(std::move(trace), iteration, options, parts_.config.mode_auto);
        parts_.log("stalloc runtime: planning iteration " + std::to_string(iteration) +
             " in the background" +
             (parts_.config.varying_sizes == VaryingSizes::Auto && policy == VaryingSizes::Largest
                  ? ", its varying sizes at their largest"
                  : ""));
      }
    }
    note_transition(key);
  }
  const std::uint32_t profiled_until = profile_base_ + parts_.config.profile_iterations;
  const bool keep = parts_.config.record_trace || iteration <= profiled_until;
  recorder_.next_iteration(keep);
  recorder_.set_timing(parts_.config.record_trace || iteration + 1 <= profiled_until);
  ++parts_.stats.iterations;
  parts_.cache.release_retired();
  // No plan is followed until choose_plan: an install short of mapping room may retire any
  // idle plan, the last one followed included.
  parts_.follower.stop_following();
  // Not one started at this boundary, however fast it was: whether it is installed here or at
  // the next one would depend on the planning thread's speed (and so would whether it is mapped
  // here, choose_plan).
  install_finished(iteration);
  choose_plan();
  // Serving from a plan without Dynamic slots, memory kept for unplanned reuse is only waste:
  // give it back. A plan with Dynamic slots packs them in the arenas every iteration.
  if (parts_.follower.active() != nullptr && parts_.follower.active()->plan().dynamic_peak_bytes == 0) {
    parts_.unplanned.release_idle();
  } else {
    parts_.unplanned.poll();
  }
}

std::vector<bool> PlanLifecycle::chunks_held_by_disowned() const {
  std::vector<bool> held;
  if (!parts_.cache.any_disowned()) return held;
  std::vector<ChunkPiece> pieces;
  for (const auto& plan : parts_.cache.installed()) {
    if (!parts_.cache.disowned(*plan) || plan->idle()) continue;
    for (std::size_t k = 0; k < plan->slot_count(); ++k) {
      const SlotState& slot = plan->slot(k);
      if (!slot.live) continue;
      pieces.clear();
      slot.footprint.append_pieces(parts_.granularity, &pieces);
      for (const ChunkPiece& piece : pieces) {
        if (held.size() <= piece.chunk) held.resize(piece.chunk + 1, false);
        held[piece.chunk] = true;
      }
    }
  }
  return held;
}

void PlanLifecycle::install_finished(std::uint32_t made_before) {
  std::vector<PlanCache::Finished> finished = parts_.cache.take_finished(made_before);
  if (finished.empty()) return;
  // The dedicated ranges' cache goes back first: no plan serves from it.
  parts_.unplanned.dedicated().release_cached();
  bool installed = false;
  bool declined = false;
  for (PlanCache::Finished& f : finished) {
    // Planned from a piece of an iteration the program has since disowned.
    if (f.iteration < profile_base_) continue;
    if (!f.plan) {
      ++parts_.stats.plan_failures;
      parts_.stats.last_plan_error = f.error;
      parts_.cache.mark_failed(f.key);
      parts_.log("stalloc runtime: planning failed: " + f.error);
      continue;
    }
    // Sizes that changed at many ordinals, none yet seen to change twice (a routing that is
    // about to change again): a plan of fixed slots would be left within its first iteration,
    // its pool made and its first views mapped for nothing. Not installed; the next comparison
    // makes the ordinals that change again Dynamic slots, and a plan of the same signature is
    // made again if it recurs.
    if (parts_.config.varying_sizes == VaryingSizes::Dynamic && f.plan->dynamic_peak_bytes == 0 &&
        recorder_.sizes_changed()) {
      ++parts_.stats.plans_deferred;
      parts_.stats.last_plan_declined = "deferred: its sizes changed at the last comparison";
      parts_.log("stalloc runtime: plan of iteration " + std::to_string(f.iteration) +
           " not installed: its sizes changed at the last comparison");
      continue;
    }
    if (std::string why; declines(*f.plan, &why)) {
      ++parts_.stats.plans_declined;
      parts_.stats.last_plan_declined = why;
      declined = true;
      parts_.cache.mark_failed(f.key);
      parts_.log("stalloc runtime: plan of iteration " + std::to_string(f.iteration) +
           " declined: " + why);
      continue;
    }
    std::string why;
    const PlanMode tried = f.plan->mode;
    PoolClaims claims;
    claims.runs = parts_.config.pool_runs && recorder_.sizes_settled();
    if (std::vector<bool> held = chunks_held_by_disowned(); parts_.pool.has_runs()) {
      // The installer renumbers the plan onto the pool's runs (run_relabelling.h).
      claims.splittable = reclaimer_.splittable_runs(held);
      claims.held = std::move(held);
    } else if (!held.empty()) {
      const std::uint64_t skipped = relocate_around(*f.plan, held);
      parts_.log("stalloc runtime: the plan skips " + std::to_string(skipped) +
           " pool chunks held by tensors of disowned plans");
    }
    wait_before_pool_growth(f.plan->num_chunks);
    auto plan = InstalledPlan::install(std::move(*f.plan), parts_.driver, parts_.pool, parts_.sync, reclaimer_,
                                       &why, claims);
    if (!plan && tried != PlanMode::Windowed) {
      // Alias mode maps every slot at once, which may exceed the live mappings the driver
      // allows: an offset plan maps each chunk once, windowed mode only what a window uses.
      // Plan again the first way, then the second.
      const PlanMode next = tried == PlanMode::Alias ? PlanMode::Offset : PlanMode::Windowed;
      parts_.log("stalloc runtime: " + std::string(plan_mode_name(tried)) + " plan not installed (" +
           why + "), planning " + std::string(plan_mode_name(next)));
      f.options.mode = next;
      parts_.cache.start_planning(std::move(f.trace), f.iteration, f.options);
      ++parts_.stats.plan_failures;
      parts_.stats.last_plan_error = why;
      continue;
    }
    if (!plan) {
      ++parts_.stats.plan_failures;
      parts_.stats.last_plan_error = why;
      parts_.cache.mark_failed(f.key);
      parts_.log("stalloc runtime: plan not installed: " + why);
      continue;
    }
    parts_.log("stalloc runtime: plan installed: " + std::to_string(plan->slot_count()) + " slots, " +
         std::to_string(plan->plan().num_chunks) + " chunks");
    parts_.cache.insert(std::move(plan), parts_.cache.next_stamp(), parts_.follower.active());
    ++parts_.stats.plan_installs;
    installed = true;
  }
  // The pool took what it needed from the cache; the rest was the profiling iterations' and
  // would only sit beside the pool.
  if (installed) parts_.memory.trim();
  // A declined plan leaves the iterations to the online path for good: its idle pages go back,
  // as at every install, and its next pages are packed afresh.
  if (declined && !installed) parts_.unplanned.release_idle();
}

void PlanLifecycle::wait_before_pool_growth(std::uint64_t chunks) {
  const std::uint64_t growth = chunks > parts_.pool.size() ? (chunks - parts_.pool.size()) * parts_.granularity : 0;
  // The arenas' idle pages as far as the pool grows beyond the chunks PhysicalMemory has cached,
  // so that it takes theirs rather than create its own beside them. The other idle pages stay:
  // they serve what a plan with Dynamic slots leaves to the arenas (tensors longer than their
  // views), which would otherwise be made again one by one in the next iteration. After a plan
  // without Dynamic slots they go at the boundary (end_iteration). Pages the GPU still runs on
  // cannot be given yet: then all of them are retired, and the growth may wait.
  if (const std::uint64_t cached = parts_.memory.cached_bytes();
      growth > cached && parts_.unplanned.give_idle_pages(growth - cached) < growth - cached) {
    parts_.unplanned.release_idle();
  }
  if (growth == 0 || parts_.memory.reserved_bytes() + growth <= parts_.memory.high_water_bytes()) return;
  if (!reclaimer_.unmaps_pending() && parts_.unplanned.dedicated().cached_bytes() == 0) return;
  ++parts_.stats.install_waits;
  reclaimer_.wait_for_unmaps();
  parts_.unplanned.release_idle();
}

bool PlanLifecycle::declines(const ChunkPlan& plan, std::string* why) const {
  // What stays beside the pool while the plan is followed: the pages and ranges that hold
  // tensors made before it (weights, optimizer state). Not the emptied ones: given back at the
  // install, or, while the GPU may still use them (events pending), soon after.
  const std::uint64_t beside = parts_.unplanned.held_beside_plans();
  const std::uint64_t pool_bytes = parts_.pool.size() * parts_.granularity;
  const std::uint64_t would = std::max(pool_bytes, plan.num_chunks * parts_.granularity) + beside;
  const std::uint64_t online = parts_.memory.high_water_bytes();
  const std::uint64_t share = parts_.config.policy.decline_share;
  if (online < parts_.config.policy.decline_from_bytes || would * share <= online * (share + 1)) {
    return false;
  }
  *why = "with the " + format_bytes(beside) + " held beside it the runtime would hold " +
         format_bytes(would) + ", more than 1/" + std::to_string(share) + " above the " +
         format_bytes(online) + " the profiled iterations held at most: served online";
  return true;
}

void PlanLifecycle::choose_plan() {
  InstalledPlan* chosen = nullptr;
  if (have_last_key_) {
    std::uint64_t best = 0;
    for (const Transition& t : transitions_) {
      if (t.from != last_key_ || t.count <= best) continue;
      if (InstalledPlan* plan = parts_.cache.find(t.to)) {
        chosen = plan;
        best = t.count;
      }
    }
    if (chosen == nullptr) chosen = parts_.cache.find(last_key_);
  }
  if (chosen == nullptr) chosen = parts_.cache.most_recent();
  if (chosen != nullptr && parts_.cache.disowned(*chosen)) chosen = nullptr;
  if (chosen != nullptr) {
    // A plan installed unmapped has its first stage of views mapped at this boundary when the
    // iteration that just ended had its signature (the next will likely follow it too), else at
    // its first match; the later stages as the iteration reaches them (installed_plan.h).
    if (chosen->deferred() && have_last_key_ && key_of(chosen->plan().signature) == last_key_) {
      chosen->map_first_stage();
    }
    if (parts_.config.varying_sizes == VaryingSizes::Largest ||
        parts_.config.varying_sizes == VaryingSizes::Auto) {
      const std::vector<bool>* varying =
          recorder_.varying_ordinals(chosen->plan().signature.allocations);
      if (varying != nullptr) chosen->set_varying(*varying);
    }
    chosen->last_used = parts_.cache.next_stamp();
    chosen->restart_windows();
  }
  parts_.follower.start_iteration(chosen);
}

void PlanLifecycle::add_plan(ChunkPlan plan) {
  std::string why;
  auto installed = InstalledPlan::install(std::move(plan), parts_.driver, parts_.pool, parts_.sync, reclaimer_, &why);
  if (!installed) throw UsageError("cannot install the plan: " + why);
  // A plan the caller gives (a saved one) is meant to be followed: mapped now.
  if (installed->deferred() && !installed->map_deferred()) {
    throw UsageError("cannot install the plan: mapping its " +
                     std::to_string(installed->view_count()) +
                     " views failed (live mappings limit?)");
  }
  parts_.cache.insert(std::move(installed), parts_.cache.next_stamp(), parts_.follower.active());
  ++parts_.stats.plan_installs;
  parts_.memory.trim();
  if (parts_.follower.active() == nullptr && parts_.follower.requests() == 0) choose_plan();
}

void PlanLifecycle::wait_for_planning() {
  // Between iterations no plan is followed until choose_plan (end_iteration).
  if (parts_.follower.requests() == 0) parts_.follower.stop_following();
  // A plan that cannot be mapped is planned again another way: wait for that one too.
  while (parts_.cache.pending() > 0) {
    parts_.cache.wait();
    install_finished();
  }
  if (parts_.follower.requests() == 0) choose_plan();
}

bool PlanLifecycle::current_kept() const {
  return parts_.config.record_trace ||
         recorder_.iteration() <= profile_base_ + parts_.config.profile_iterations;
}

}  // namespace stalloc
