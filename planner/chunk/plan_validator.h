// An independent check of a physical-chunk plan: it shares no code with the planner, so a bug
// in one is not hidden by the same bug in the other. Every test that makes a plan runs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/chunk/chunk_plan.h"

namespace stalloc {

struct PlanValidation {
  bool ok = true;
  std::vector<std::string> errors;         // the first problems found (at most 20)
  std::uint64_t lower_bound_bytes = 0;     // recomputed: peak live bytes of non-dynamic slots
  std::uint64_t peak_chunks_in_use = 0;    // most chunks backing live slots at one time
  std::uint64_t peak_physical_bytes = 0;   // peak_chunks_in_use * granularity
};

// Checks: every chunk index < num_chunks; offset < G; chunks.size() == ceil((offset+size)/G)
// for planned slots and no chunks for dynamic ones; lifetimes inside the iteration; no two slots
// with overlapping lifetimes use overlapping bytes of a chunk; budget chunks idle over their
// dynamic slot's lifetime; the plan's lower bound and (alias and offset plans) mapping count
// match the recomputed ones.
PlanValidation validate_plan(const ChunkPlan& plan);

}  // namespace stalloc
