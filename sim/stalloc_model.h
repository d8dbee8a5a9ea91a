// The published STAlloc design as a simulator model ("stalloc-paper"): one offset-planned pool
// for the profiled iteration, a slab for requests of at most 512 B, a caching pool for everything
// the plan does not cover. The simulator's "stalloc" and "stalloc-windowed" rows are this
// project's runtime itself (sim/runtime_model.h); this model is kept beside them to show what the
// published single-pool design reserves and which driver calls it makes.
#pragma once

#include <memory>

#include "trace/trace.h"
#include "sim/allocator_model.h"

namespace stalloc {

// The model plans the profiled iteration of the trace when it ends (docs/planner.md, "The STAlloc
// allocator model"). Throws UsageError for a granularity that is not a positive multiple of 512.
std::unique_ptr<AllocatorModel> make_stalloc_paper_model(const Trace& trace, const ModelOptions& options);

}  // namespace stalloc
