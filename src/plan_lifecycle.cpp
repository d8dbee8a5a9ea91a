#include "src/plan_lifecycle.h"

#include <algorithm>

#include "common/units.h"
#include "src/chunk_relocation.h"

namespace stalloc {

PlanLifecycle::PlanLifecycle(const RuntimeConfig& config, std::uint64_t granularity,
                             vmm::Driver& driver, PhysicalMemory& memory, PlanPool& pool,
                             StreamSync& sync, PlanCache& cache, PlanFollower& follower,
                             UnplannedServer& unplanned, RuntimeReclaimer& reclaimer,
                             RuntimeStats& stats, const RuntimeLog& log)
    : config_(config),
      granularity_(granularity),
      driver_(driver),
      memory_(memory),
      pool_(pool),
      sync_(sync),
      cache_(cache),
      follower_(follower),
      unplanned_(unplanned),
      reclaimer_(reclaimer),
      stats_(stats),
      log_(log) {
  recorder_.set_timing(true);
}

void PlanLifecycle::detect_boundary(std::uint64_t size, std::uint32_t stream,
                                    std::uint64_t live_allocations) {
  const std::uint64_t dropped = detector_.dropped();
  if (detector_.boundary_before(size, stream, live_allocations)) {
    ++stats_.auto_steps;
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
  log_("stalloc runtime: " + why + "; profiling again from the program's iterations");
  transitions_.clear();
  have_last_key_ = false;
  profile_base_ = recorder_.iteration();
  cache_.disown_used();
  cache_.retire_idle(nullptr);
  follower_.stop_following();
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
      if (transitions_.size() >= config_.policy.transitions_kept) transitions_.clear();
      transitions_.push_back({last_key_, key, 1});
    }
  }
  last_key_ = key;
  have_last_key_ = true;
}

void PlanLifecycle::end_iteration() {
  const std::uint32_t iteration = recorder_.iteration();
  if (follower_.requests() > 0) {
    SignatureKey key;
    InstalledPlan* active = follower_.active();
    if (follower_.served_by_active()) {
      key = key_of(active->plan().signature);
      if (const std::uint64_t off = follower_.off_plan_requests(); off > 0) {
        log_("stalloc runtime: iteration " + std::to_string(iteration) +
             " followed its plan of " + std::to_string(active->slot_count()) + " slots, " +
             std::to_string(off) + (off == 1 ? " request or slot" : " requests or slots") +
             " off it (" + format_bytes(follower_.off_plan_bytes()) + "): not planned");
      }
    } else {
      if (active != nullptr) {
        log_("stalloc runtime: iteration " + std::to_string(iteration) + " left its plan of " +
             std::to_string(active->slot_count()) + " slots: " +
             std::to_string(follower_.misses()) + " requests missed, " +
             std::to_string(follower_.slots_not_taken()) + " slots not taken (" +
             format_bytes(follower_.off_plan_bytes()) + ")");
      }
      recorder_.compare_sizes();
      // auto: sizes that vary together (sequence lengths) are planned at their largest, so
      // that every shorter iteration fits the plan's slots with no VMM call and only one
      // longer than any seen is planned again; sizes that vary apart (MoE) get Dynamic slots.
      VaryingSizes policy = config_.varying_sizes;
      Trace trace = recorder_.iteration_trace(config_.varying_sizes, &policy);
      trace.device = driver_.device();
      key = key_of(signature_of(trace, iteration));
      if (iteration >= profile_base_ + config_.profile_iterations && !cache_.known(key)) {
        PlanOptions options;
        options.mode = config_.mode;
        options.granularity = granularity_;
        options.windows = config_.windows;
        // A one-off tensor's slot would stand between Dynamic slots that take any size, and the
        // next iteration, which does not make it, would meet each slot one early
        // (slot_classifier.h). Plans at the largest sizes keep it: without, plans of lengths
        // in random order held less.
        options.plan_one_offs = policy != VaryingSizes::Dynamic;
        // Serial: the planner runs beside training and must not take every core from it.
        options.dsa.parallel = false;
        cache_.start_planning(std::move(trace), iteration, options, config_.mode_auto);
        log_("stalloc runtime: planning iteration " + std::to_string(iteration) +
             " in the background" +
             (config_.varying_sizes == VaryingSizes::Auto && policy == VaryingSizes::Largest
                  ? ", its varying sizes at their largest"
                  : ""));
      }
    }
    note_transition(key);
  }
  const std::uint32_t profiled_until = profile_base_ + config_.profile_iterations;
  const bool keep = config_.record_trace || iteration <= profiled_until;
  recorder_.next_iteration(keep);
  recorder_.set_timing(config_.record_trace || iteration + 1 <= profiled_until);
  ++stats_.iterations;
  cache_.release_retired();
  // No plan is followed until choose_plan: an install short of mapping room may retire any
  // idle plan, the last one followed included.
  follower_.stop_following();
  // Not one started at this boundary, however fast it was: whether it is installed here or at
  // the next one would depend on the planning thread's speed (and so would whether it is mapped
  // here, choose_plan).
  install_finished(iteration);
  choose_plan();
  // Serving from a plan without Dynamic slots, memory kept for unplanned reuse is only waste:
  // give it back. A plan with Dynamic slots packs them in the arenas every iteration.
  if (follower_.active() != nullptr && follower_.active()->plan().dynamic_peak_bytes == 0) {
    unplanned_.release_idle();
  } else {
    unplanned_.poll();
  }
}

std::vector<bool> PlanLifecycle::chunks_held_by_disowned() const {
  std::vector<bool> held;
  if (!cache_.any_disowned()) return held;
  std::vector<ChunkPiece> pieces;
  for (const auto& plan : cache_.installed()) {
    if (!cache_.disowned(*plan) || plan->idle()) continue;
    for (std::size_t k = 0; k < plan->slot_count(); ++k) {
      const SlotState& slot = plan->slot(k);
      if (!slot.live) continue;
      pieces.clear();
      slot.footprint.append_pieces(granularity_, &pieces);
      for (const ChunkPiece& piece : pieces) {
        if (held.size() <= piece.chunk) held.resize(piece.chunk + 1, false);
        held[piece.chunk] = true;
      }
    }
  }
  return held;
}

void PlanLifecycle::install_finished(std::uint32_t made_before) {
  std::vector<PlanCache::Finished> finished = cache_.take_finished(made_before);
  if (finished.empty()) return;
  // The dedicated ranges' cache goes back first: no plan serves from it.
  unplanned_.dedicated().release_cached();
  bool installed = false;
  bool declined = false;
  for (PlanCache::Finished& f : finished) {
    // Planned from a piece of an iteration the program has since disowned.
    if (f.iteration < profile_base_) continue;
    if (!f.plan) {
      ++stats_.plan_failures;
      stats_.last_plan_error = f.error;
      cache_.mark_failed(f.key);
      log_("stalloc runtime: planning failed: " + f.error);
      continue;
    }
    // Sizes that changed at many ordinals, none yet seen to change twice (a routing that is
    // about to change again): a plan of fixed slots would be left within its first iteration,
    // its pool made and its first views mapped for nothing. Not installed; the next comparison
    // makes the ordinals that change again Dynamic slots, and a plan of the same signature is
    // made again if it recurs.
    if (config_.varying_sizes == VaryingSizes::Dynamic && f.plan->dynamic_peak_bytes == 0 &&
        recorder_.sizes_changed()) {
      ++stats_.plans_deferred;
      stats_.last_plan_declined = "deferred: its sizes changed at the last comparison";
      log_("stalloc runtime: plan of iteration " + std::to_string(f.iteration) +
           " not installed: its sizes changed at the last comparison");
      continue;
    }
    if (std::string why; declines(*f.plan, &why)) {
      ++stats_.plans_declined;
      stats_.last_plan_declined = why;
      declined = true;
      cache_.mark_failed(f.key);
      log_("stalloc runtime: plan of iteration " + std::to_string(f.iteration) +
           " declined: " + why);
      continue;
    }
    std::string why;
    const PlanMode tried = f.plan->mode;
    PoolClaims claims;
    claims.runs = config_.pool_runs && recorder_.sizes_settled();
    if (std::vector<bool> held = chunks_held_by_disowned(); pool_.has_runs()) {
      // The installer renumbers the plan onto the pool's runs (run_relabelling.h).
      claims.splittable = reclaimer_.splittable_runs(held);
      claims.held = std::move(held);
    } else if (!held.empty()) {
      const std::uint64_t skipped = relocate_around(*f.plan, held);
      log_("stalloc runtime: the plan skips " + std::to_string(skipped) +
           " pool chunks held by tensors of disowned plans");
    }
    wait_before_pool_growth(f.plan->num_chunks);
    auto plan = InstalledPlan::install(std::move(*f.plan), driver_, pool_, sync_, reclaimer_,
                                       &why, claims);
    if (!plan && tried != PlanMode::Windowed) {
      // Alias mode maps every slot at once, which may exceed the live mappings the driver
      // allows: an offset plan maps each chunk once, windowed mode only what a window uses.
      // Plan again the first way, then the second.
      const PlanMode next = tried == PlanMode::Alias ? PlanMode::Offset : PlanMode::Windowed;
      log_("stalloc runtime: " + std::string(plan_mode_name(tried)) + " plan not installed (" +
           why + "), planning " + std::string(plan_mode_name(next)));
      f.options.mode = next;
      cache_.start_planning(std::move(f.trace), f.iteration, f.options);
      ++stats_.plan_failures;
      stats_.last_plan_error = why;
      continue;
    }
    if (!plan) {
      ++stats_.plan_failures;
      stats_.last_plan_error = why;
      cache_.mark_failed(f.key);
      log_("stalloc runtime: plan not installed: " + why);
      continue;
    }
    log_("stalloc runtime: plan installed: " + std::to_string(plan->slot_count()) + " slots, " +
         std::to_string(plan->plan().num_chunks) + " chunks");
    cache_.insert(std::move(plan), cache_.next_stamp(), follower_.active());
    ++stats_.plan_installs;
    installed = true;
  }
  // The pool took what it needed from the cache; the rest was the profiling iterations' and
  // would only sit beside the pool.
  if (installed) memory_.trim();
  // A declined plan leaves the iterations to the online path for good: its idle pages go back,
  // as at every install, and its next pages are packed afresh.
  if (declined && !installed) unplanned_.release_idle();
}

void PlanLifecycle::wait_before_pool_growth(std::uint64_t chunks) {
  const std::uint64_t growth = chunks > pool_.size() ? (chunks - pool_.size()) * granularity_ : 0;
  // The arenas' idle pages as far as the pool grows beyond the chunks PhysicalMemory has cached,
  // so that it takes theirs rather than create its own beside them. The other idle pages stay:
  // they serve what a plan with Dynamic slots leaves to the arenas (tensors longer than their
  // views), which would otherwise be made again one by one in the next iteration. After a plan
  // without Dynamic slots they go at the boundary (end_iteration). Pages the GPU still runs on
  // cannot be given yet: then all of them are retired, and the growth may wait.
  if (const std::uint64_t cached = memory_.cached_bytes();
      growth > cached && unplanned_.give_idle_pages(growth - cached) < growth - cached) {
    unplanned_.release_idle();
  }
  if (growth == 0 || memory_.reserved_bytes() + growth <= memory_.high_water_bytes()) return;
  if (!reclaimer_.unmaps_pending() && unplanned_.dedicated().cached_bytes() == 0) return;
  ++stats_.install_waits;
  reclaimer_.wait_for_unmaps();
  unplanned_.release_idle();
}

bool PlanLifecycle::declines(const ChunkPlan& plan, std::string* why) const {
  // What stays beside the pool while the plan is followed: the pages and ranges that hold
  // tensors made before it (weights, optimizer state). Not the emptied ones: given back at the
  // install, or, while the GPU may still use them (events pending), soon after.
  const std::uint64_t beside = unplanned_.held_beside_plans();
  const std::uint64_t pool_bytes = pool_.size() * granularity_;
  const std::uint64_t would = std::max(pool_bytes, plan.num_chunks * granularity_) + beside;
  const std::uint64_t online = memory_.high_water_bytes();
  const std::uint64_t share = config_.policy.decline_share;
  if (online < config_.policy.decline_from_bytes || would * share <= online * (share + 1)) {
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
      if (InstalledPlan* plan = cache_.find(t.to)) {
        chosen = plan;
        best = t.count;
      }
    }
    if (chosen == nullptr) chosen = cache_.find(last_key_);
  }
  if (chosen == nullptr) chosen = cache_.most_recent();
  if (chosen != nullptr && cache_.disowned(*chosen)) chosen = nullptr;
  if (chosen != nullptr) {
    // A plan installed unmapped has its first stage of views mapped at this boundary when the
    // iteration that just ended had its signature (the next will likely follow it too), else at
    // its first match; the later stages as the iteration reaches them (installed_plan.h).
    if (chosen->deferred() && have_last_key_ && key_of(chosen->plan().signature) == last_key_) {
      chosen->map_first_stage();
    }
    if (config_.varying_sizes == VaryingSizes::Largest ||
        config_.varying_sizes == VaryingSizes::Auto) {
      const std::vector<bool>* varying =
          recorder_.varying_ordinals(chosen->plan().signature.allocations);
      if (varying != nullptr) chosen->set_varying(*varying);
    }
    chosen->last_used = cache_.next_stamp();
    chosen->restart_windows();
  }
  follower_.start_iteration(chosen);
}

void PlanLifecycle::add_plan(ChunkPlan plan) {
  std::string why;
  auto installed = InstalledPlan::install(std::move(plan), driver_, pool_, sync_, reclaimer_, &why);
  if (!installed) throw UsageError("cannot install the plan: " + why);
  // A plan the caller gives (a saved one) is meant to be followed: mapped now.
  if (installed->deferred() && !installed->map_deferred()) {
    throw UsageError("cannot install the plan: mapping its " +
                     std::to_string(installed->view_count()) +
                     " views failed (live mappings limit?)");
  }
  cache_.insert(std::move(installed), cache_.next_stamp(), follower_.active());
  ++stats_.plan_installs;
  memory_.trim();
  if (follower_.active() == nullptr && follower_.requests() == 0) choose_plan();
}

void PlanLifecycle::wait_for_planning() {
  // Between iterations no plan is followed until choose_plan (end_iteration).
  if (follower_.requests() == 0) follower_.stop_following();
  // A plan that cannot be mapped is planned again another way: wait for that one too.
  while (cache_.pending() > 0) {
    cache_.wait();
    install_finished();
  }
  if (follower_.requests() == 0) choose_plan();
}

bool PlanLifecycle::current_kept() const {
  return config_.record_trace ||
         recorder_.iteration() <= profile_base_ + config_.profile_iterations;
}

}  // namespace stalloc
