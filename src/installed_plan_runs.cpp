// InstalledPlan over a pool of runs (pool_runs.h): the plan renumbered onto the pool's runs at
// its install, the runs its new chunks come in, and a run unmapped and mapped again chunk by
// chunk when the reclaimer splits it.
#include <algorithm>

#include "src/installed_plan.h"
#include "src/pool_runs.h"

namespace stalloc {

void InstalledPlan::relabel_onto_pool_runs(const PoolClaims& claims, Reclaimer& reclaimer) {
  const auto labels = static_cast<std::uint32_t>(plan_.num_chunks);
  const std::vector<bool> alone = budget_chunks();
  const std::vector<const std::vector<std::uint32_t>*> views = views_and_slots();
  // A run that could not be split is not offered again; the rest are chunks alone by then.
  PoolClaims offered = claims;
  std::vector<std::uint32_t> to;
  for (int attempt = 0;; ++attempt) {
    if (attempt == kSplitAttempts) offered.splittable.clear();
    std::vector<std::uint32_t> split;
    to = relabel_onto_runs(views, alone, labels, pool_, offered, &split);
    bool all = true;
    for (std::uint32_t head : split) {
      if (reclaimer.split_run(head)) continue;
      offered.splittable[head] = false;
      all = false;
    }
    if (all) break;
  }
  for (PlannedSlot& s : plan_.slots) {
    for (std::uint32_t& c : s.chunks) c = to[c];
    for (std::uint32_t& c : s.budget_chunks) c = to[c];
  }
  for (View& v : views_) {
    for (std::uint32_t& c : v.chunks) c = to[c];
  }
  std::uint32_t top = 0;
  for (std::uint32_t c : to) top = std::max(top, c + 1);
  plan_.num_chunks = top;
}

std::vector<bool> InstalledPlan::budget_chunks() const {
  std::vector<bool> marked(plan_.num_chunks, false);
  for (const PlannedSlot& s : plan_.slots) {
    for (std::uint32_t c : s.budget_chunks) marked[c] = true;
  }
  return marked;
}

std::vector<const std::vector<std::uint32_t>*> InstalledPlan::views_and_slots() const {
  std::vector<const std::vector<std::uint32_t>*> out;
  out.reserve(views_.size() + plan_.slots.size());
  for (const View& v : views_) out.push_back(&v.chunks);
  for (std::size_t i = 0; i < plan_.slots.size(); ++i) out.push_back(&range_chunks(i));
  return out;
}

std::vector<std::uint32_t> InstalledPlan::new_pool_runs(const PoolClaims& claims) const {
  const auto first = static_cast<std::uint32_t>(pool_.size());
  if (plan_.num_chunks <= first) return {};
  if (!claims.runs) return std::vector<std::uint32_t>(plan_.num_chunks - first, 1);
  return pool_runs(views_and_slots(), budget_chunks(), first,
                   static_cast<std::uint32_t>(plan_.num_chunks));
}

std::string InstalledPlan::count_mappings(const std::vector<std::uint32_t>& runs,
                                          std::uint64_t* mappings) const {
  // The run heads of the chunks the pool will have once it grows by `runs`.
  const auto first = static_cast<std::uint32_t>(pool_.size());
  std::vector<std::uint32_t> new_head;
  for (std::uint32_t length : runs) {
    const auto head = static_cast<std::uint32_t>(first + new_head.size());
    new_head.insert(new_head.end(), length, head);
  }
  auto head_of = [&](std::uint32_t c) { return c < first ? pool_.run_head(c) : new_head[c - first]; };
  auto length_of = [&](std::uint32_t head) {
    if (head < first) return pool_.run_length(head);
    std::uint32_t n = 1;
    while (head + n < plan_.num_chunks && new_head[head + n - first] == head) ++n;
    return n;
  };
  *mappings = 0;
  for (const View& v : views_) {
    for (std::size_t j = 0; j < v.chunks.size();) {
      const std::uint32_t c = v.chunks[j];
      const std::uint32_t head = head_of(c);
      const std::uint32_t length = length_of(head);
      if (!holds_run(v.chunks, j, head, length)) {
        return "the plan maps pool chunk " + std::to_string(c) + " apart from the run of " +
               std::to_string(length) + " chunks from " + std::to_string(head) +
               " that shares its physical handle";
      }
      ++*mappings;
      j += length;
    }
  }
  return {};
}

std::vector<InstalledPlan::RunPlace> InstalledPlan::run_places(std::uint32_t head) {
  std::vector<RunPlace> places;
  for (std::uint32_t o : views_of(head)) {
    const View& v = views_[o];
    if (v.mapped == 0) continue;
    std::uint32_t page = 0;
    for (std::uint32_t r = 0; r < v.runs.size(); ++r) {
      const std::uint32_t length = v.runs[r] & ~kHole;
      if (v.chunks[page] == head && (v.runs[r] & kHole) == 0) places.push_back({o, page, r});
      page += length;
    }
  }
  return places;
}

void InstalledPlan::unmap_run(const std::vector<RunPlace>& places) {
  for (const RunPlace& at : places) {
    View& v = views_[at.view];
    driver_.unmap(base_ + (v.first_page + at.page) * granularity_,
                  std::uint64_t{v.runs[at.run]} * granularity_);
    v.runs[at.run] |= kHole;
    --live_mappings_;
  }
}

void InstalledPlan::map_run_again(std::uint32_t head, std::uint32_t length,
                                  const std::vector<RunPlace>& places) {
  // Later places first: an earlier one's new entries would move their indices.
  for (auto it = places.rbegin(); it != places.rend(); ++it) {
    View& v = views_[it->view];
    const vmm::DevicePtr base = base_ + (v.first_page + it->page) * granularity_;
    std::vector<std::uint32_t> entries;
    std::uint32_t k = 0;
    for (; k < length;) {
      const std::uint32_t run = pool_.run_length(pool_.run_head(head + k));
      if (pool_.run_head(head + k) != head + k || k + run > length ||
          driver_.map(base + k * granularity_, run * granularity_, 0, pool_.handle(head + k)) !=
              vmm::Status::Success) {
        break;
      }
      entries.push_back(run);
      ++live_mappings_;
      k += run;
    }
    if (k > 0 && driver_.set_access(base, k * granularity_, vmm::Access::ReadWrite) !=
                     vmm::Status::Success) {
      for (std::uint32_t j = 0, page = 0; j < entries.size(); page += entries[j++]) {
        driver_.unmap(base + page * granularity_, entries[j] * granularity_);
        --live_mappings_;
      }
      entries.clear();
      k = 0;
    }
    // A hole where the driver refused: what is left unmapped there is never handed out.
    if (k < length) {
      entries.push_back((length - k) | kHole);
      pool_.set_aside(head + k, length - k);
    }
    v.runs.erase(v.runs.begin() + it->run);
    v.runs.insert(v.runs.begin() + it->run, entries.begin(), entries.end());
  }
}

}  // namespace stalloc
