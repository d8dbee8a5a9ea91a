// Installed plans by iteration signature, and the background planner. An iteration whose
// signature has no plan is planned on a std::thread while training continues on the dynamic
// path; the runtime installs finished plans at the next iteration boundary (installing makes
// driver calls: never on the allocation path). At most `capacity` plans stay installed; the
// least recently used idle plan goes first, and its views stay mapped until the GPU work that
// used them has completed.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "planner/chunk/chunk_plan.h"
#include "src/installed_plan.h"

namespace stalloc {

// What identifies a request sequence for the cache: the size/stream hash and the allocation
// count (the request count is left out: frees of tensors from the previous iteration are not
// part of what the runtime records for an iteration, and they do not change the slots).
struct SignatureKey {
  std::uint64_t hash = 0;
  std::uint64_t allocations = 0;
  friend bool operator==(const SignatureKey&, const SignatureKey&) = default;
};
inline SignatureKey key_of(const TraceSignature& s) { return {s.hash, s.allocations}; }

class PlanCache {
 public:
  explicit PlanCache(std::size_t capacity) : capacity_(capacity) {}
  ~PlanCache();
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  InstalledPlan* find(const SignatureKey& key);
  // Installed, being planned, or failed to plan: nothing more to do for it.
  bool known(const SignatureKey& key) const;
  // Adds a plan, dropping least recently used idle ones past the capacity, never `keep`.
  void insert(std::unique_ptr<InstalledPlan> plan, std::uint64_t stamp, const InstalledPlan* keep);
  void mark_failed(const SignatureKey& key) { failed_.push_back(key); }
  const std::vector<std::unique_ptr<InstalledPlan>>& installed() const { return installed_; }
  // Whether a retiring plan maps the pool chunk (it waits for the GPU, nothing of it moves).
  bool retiring_maps(std::uint32_t chunk) const;
  bool holds(const InstalledPlan* plan) const;
  // Destroys the evicted plans the GPU is done with (InstalledPlan::retire); at boundaries.
  void release_retired();
  // Evicts every idle plan but `keep`, whatever the capacity.
  void retire_idle(const InstalledPlan* keep);
  std::size_t retiring() const { return retiring_.size(); }
  InstalledPlan* most_recent() const;

  // Least-recently-used stamps: a plan installed or chosen for an iteration takes the next one.
  std::uint64_t next_stamp() { return ++stamp_; }
  // The plans used so far were made from pieces of an iteration (Runtime::step after detected
  // boundaries): none of them is chosen again.
  void disown_used() { disowned_stamp_ = stamp_; }
  bool disowned(const InstalledPlan& plan) const { return plan.last_used <= disowned_stamp_; }
  bool any_disowned() const { return disowned_stamp_ != 0; }

  // try_offset: with options.mode alias, also plan the offset pool and keep it where it needs
  // no more chunks (mode:auto).
  void start_planning(Trace trace, std::uint32_t iteration, PlanOptions options,
                      bool try_offset = false);
  struct Finished {
    SignatureKey key;
    std::optional<ChunkPlan> plan;
    std::string error;
    Trace trace;  // what it was planned from, for a retry in another mode
    std::uint32_t iteration = 0;
    PlanOptions options;
  };
  // Finished jobs planned from iterations before `made_before`.
  std::vector<Finished> take_finished(std::uint32_t made_before = UINT32_MAX);
  std::size_t pending() const { return jobs_.size(); }
  // Blocks until every job has finished (tests and deterministic replays).
  void wait();

 private:
  struct Job {
    SignatureKey key;
    Trace trace;
    std::uint32_t iteration = 0;
    PlanOptions options;
    std::thread thread;
    std::atomic<bool> done{false};
    std::optional<ChunkPlan> plan;
    std::string error;
  };
  void evict(const InstalledPlan* keep);

  std::size_t capacity_;
  std::vector<std::unique_ptr<InstalledPlan>> installed_;
  std::vector<std::unique_ptr<InstalledPlan>> retiring_;  // evicted, views still mapped
  std::vector<SignatureKey> failed_;
  std::list<Job> jobs_;
  std::uint64_t stamp_ = 0;
  std::uint64_t disowned_stamp_ = 0;
};

}  // namespace stalloc
