// Which of a plan's new pool chunks may share one physical handle.
//
// Why: the driver's cost is per call, not per byte (docs/driver_costs.md: on an H200 a
// cuMemCreate of 32 granules costs 9.4 us against 8.3 for one), and a plan's install made one
// cuMemCreate per pool chunk and one cuMemMap per chunk of every view: llama3-8b-64k-packed's
// install was 22,619 creates and 22,647 maps, est. 344 of its 383 ms. But cuMemMap maps a
// handle whole (CUDA_ERROR_NOT_SUPPORTED for part of one, measured on the H200) and cuMemUnmap
// undoes one cuMemMap whole, so chunks may share a handle only where every view that holds one
// of them holds them all, in order, back to back: a view then maps the run in one call.
//
// Chunks stay alone where the pool hands them out one at a time: a Dynamic slot's budget (its
// tenant's size varies; the lender lends its pages to the arenas while it is idle), chunks no
// view holds, and chunks PhysicalMemory has cached (PlanPool::grow_to). The installer also
// counts every slot's chunks as a view, so that a slot holds all of a run or none of it: a
// run's chunks then have their tenants at the same times, and the lender, which lends a run
// only whole (split), never finds a run idle but for a chunk a tenant keeps. Cut at the views
// only, an iteration that left its plan found 31 idle chunks stranded in three runs beside
// live tenants, and the arenas made the memory again (llama7b-tp2pp2-r at 2,048 tokens, then
// 4,096: 99.70 -> 98.72%; with the slots counted, 99.70% as without runs). A later plan over
// the same pool is renumbered onto its runs (run_relabelling.h); a run is split into chunks
// alone only with no tenant (RuntimeReclaimer::split_run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stalloc {

// The largest run: the largest handle bench_vmm timed on a GPU (32 granules).
inline constexpr std::uint32_t kMaxRunChunks = 32;

// The lengths of the runs that chunks [first, count) come in, in order, summing to
// count - first: maximal runs of consecutive chunks that every view holds whole, in order and
// back to back, of at most max_length chunks; those marked in `alone` (indexed by chunk; past
// its end: not marked) and those no view holds are runs of one.
std::vector<std::uint32_t> pool_runs(const std::vector<const std::vector<std::uint32_t>*>& views,
                                     const std::vector<bool>& alone, std::uint32_t first,
                                     std::uint32_t count, std::uint32_t max_length = kMaxRunChunks);

// Whether chunks[at..] begin with the run head, head + 1, ..., head + length - 1 (a view holds
// the pool run whole there and may map it in one call).
inline bool holds_run(const std::vector<std::uint32_t>& chunks, std::size_t at,
                      std::uint32_t head, std::uint32_t length) {
  if (at + length > chunks.size()) return false;
  for (std::uint32_t k = 0; k < length; ++k) {
    if (chunks[at + k] != head + k) return false;
  }
  return true;
}

}  // namespace stalloc
