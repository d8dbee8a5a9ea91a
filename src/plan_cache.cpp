#include "src/plan_cache.h"

#include <algorithm>

namespace stalloc {

PlanCache::~PlanCache() { wait(); }

InstalledPlan* PlanCache::find(const SignatureKey& key) {
  for (auto& p : installed_) {
    if (key_of(p->plan().signature) == key) return p.get();
  }
  return nullptr;
}

bool PlanCache::known(const SignatureKey& key) const {
  for (const auto& p : installed_) {
    if (key_of(p->plan().signature) == key) return true;
  }
  for (const Job& j : jobs_) {
    if (j.key == key) return true;
  }
  return std::find(failed_.begin(), failed_.end(), key) != failed_.end();
}

bool PlanCache::holds(const InstalledPlan* plan) const {
  return std::any_of(installed_.begin(), installed_.end(),
                     [&](const std::unique_ptr<InstalledPlan>& p) { return p.get() == plan; });
}

InstalledPlan* PlanCache::most_recent() const {
  InstalledPlan* best = nullptr;
  for (const auto& p : installed_) {
    if (best == nullptr || p->last_used > best->last_used) best = p.get();
  }
  return best;
}

void PlanCache::insert(std::unique_ptr<InstalledPlan> plan, std::uint64_t stamp,
                       const InstalledPlan* keep) {
  plan->last_used = stamp;
  installed_.push_back(std::move(plan));
  evict(keep);
}

void PlanCache::retire_idle(const InstalledPlan* keep) {
  const std::size_t capacity = capacity_;
  capacity_ = 0;
  evict(keep);
  capacity_ = capacity;
}

void PlanCache::evict(const InstalledPlan* keep) {
  while (installed_.size() > capacity_) {
    auto victim = installed_.end();
    for (auto it = installed_.begin(); it != installed_.end(); ++it) {
      if (it->get() != keep && (*it)->idle() && (victim == installed_.end() || (*it)->last_used < (*victim)->last_used)) {
        victim = it;
      }
    }
    if (victim == installed_.end()) return;  // every plan has live tensors: keep them for now
    (*victim)->retire();
    retiring_.push_back(std::move(*victim));
    installed_.erase(victim);
  }
}

bool PlanCache::retiring_maps(std::uint32_t chunk) const {
  return std::any_of(retiring_.begin(), retiring_.end(),
                     [&](const std::unique_ptr<InstalledPlan>& p) { return p->maps(chunk); });
}

void PlanCache::release_retired() {
  std::erase_if(retiring_, [](const std::unique_ptr<InstalledPlan>& p) { return p->gpu_done(); });
}

namespace {

// An alias plan maps each chunk once per view that uses it (hundreds of thousands of mappings
// on the 7B presets at 2 MiB); an offset plan of the same iteration lays every slot out as
// consecutive chunks of one pool, each chunk mapped once. Where the offset plan needs no more
// chunks it is taken. Not with Dynamic slots: offsets give them no budget chunks.
ChunkPlan plan_for_install(const Trace& trace, std::uint32_t iteration, const PlanOptions& options,
                           bool try_offset) {
  ChunkPlan plan = plan_iteration(trace, iteration, options);
  if (!try_offset || options.mode != PlanMode::Alias || plan.dynamic_peak_bytes > 0) return plan;
  PlanOptions offset = options;
  offset.mode = PlanMode::Offset;
  ChunkPlan packed = plan_iteration(trace, iteration, offset);
  return packed.num_chunks <= plan.num_chunks ? packed : plan;
}

}  // namespace

void PlanCache::start_planning(Trace trace, std::uint32_t iteration, PlanOptions options,
                               bool try_offset) {
  Job& job = jobs_.emplace_back();
  job.key = key_of(signature_of(trace, iteration));
  job.trace = std::move(trace);
  job.iteration = iteration;
  job.options = options;
  // The thread reads job.trace and writes job.plan/error; nobody touches them until done.
  job.thread = std::thread([&job, try_offset] {
    try {
      job.plan = plan_for_install(job.trace, job.iteration, job.options, try_offset);
    } catch (const std::exception& e) {
      job.error = e.what();
    }
    job.done.store(true, std::memory_order_release);
  });
}

std::vector<PlanCache::Finished> PlanCache::take_finished(std::uint32_t made_before) {
  std::vector<Finished> out;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->iteration >= made_before || !it->done.load(std::memory_order_acquire)) {
      ++it;
      continue;
    }
    if (it->thread.joinable()) it->thread.join();
    out.push_back({it->key, std::move(it->plan), std::move(it->error), std::move(it->trace),
                   it->iteration, it->options});
    it = jobs_.erase(it);
  }
  return out;
}

void PlanCache::wait() {
  for (Job& j : jobs_) {
    if (j.thread.joinable()) j.thread.join();
  }
}

}  // namespace stalloc
