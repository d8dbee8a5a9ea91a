// Moves a plan off pool chunks that tensors outside it still hold. A plan names pool chunks
// from 0 up, and its slots are only served where their chunks are free: a tensor that stays
// live in a chunk the plan uses (one served by a plan the runtime has since disowned, see
// Runtime::disown_detected_iterations) would make every slot of that chunk a conflict, every
// iteration, each conflict a dynamic allocation. Renumbering the plan's chunks onto the free
// ones costs the pool only the chunks those tensors hold, which it holds anyway.
#pragma once

#include <vector>

#include "planner/chunk/chunk_plan.h"

namespace stalloc {

// Renumbers the plan's chunks (slot ranges, Dynamic budgets) in order onto the pool chunks
// not in `held` (indexed by pool chunk; chunks past its end are free), and sets num_chunks to
// the pool size the plan now needs. Returns how many held chunks fall below that size.
std::uint64_t relocate_around(ChunkPlan& plan, const std::vector<bool>& held);

}  // namespace stalloc
