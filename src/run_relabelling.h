// Renumbers a plan's chunks onto a pool that already has runs (pool_runs.h), so that every
// view holds each run whole. A plan names its chunks 0, 1, ... as its colouring found them;
// any numbering is as good to it (the chunks are alike), but the pool's runs are fixed once
// made: a later plan (another sequence length, another MoE routing) numbered on its own splits
// them, and its install would be refused (qwen-moe: 6 of its 7 plans, 99.83% -> 76.51%).
//
// The plan's own runs (chunks its views all hold together, over its own numbering) are laid
// onto the pool's runs, the pool's longest first, each onto the best-fitting piece of the
// plan's that is at least as long; what is left goes onto the pool's chunks alone, then onto
// runs it may split (a split costs a release and a create per chunk; growing the pool instead
// costs memory), then past the pool's end, in the plan's order, where the installer makes new
// runs of it.
#pragma once

#include <cstdint>
#include <vector>

#include "src/plan_pool.h"

namespace stalloc {

// What the pool allows a plan's install.
struct PoolClaims {
  // The pool's new chunks may come in runs (pool_runs.h): the runtime expects the plan to be
  // followed (Recorder::sizes_settled). A plan left while tenants live in its views keeps its
  // runs whole, and the arenas then cannot borrow them (qwen-moe with runs: 76.99%).
  bool runs = false;
  std::vector<bool> held;        // by pool chunk: a tenant outside the plan keeps it
  std::vector<bool> splittable;  // by a run's first chunk: no tenant, may be unmapped; the
                                 // install's Reclaimer splits those it needs (split_run)
};

// The pool chunk for each of the plan's `labels` chunks, given its views (sequences of its
// chunks, its slots' too) and the chunks that must stay alone (Dynamic budgets); never a held
// chunk. The runs to split first go to *split (their first chunks, for PlanPool::split_run).
std::vector<std::uint32_t> relabel_onto_runs(const std::vector<const std::vector<std::uint32_t>*>& views,
                                             const std::vector<bool>& alone, std::uint32_t labels,
                                             const PlanPool& pool, const PoolClaims& claims,
                                             std::vector<std::uint32_t>* split);

}  // namespace stalloc
