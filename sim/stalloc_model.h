// The STAlloc allocator models the simulator compares, built from this project's plans:
//   "stalloc"          physical-chunk plans in alias mode (zero VMM calls per steady iteration);
//   "stalloc-windowed" the same plans mapped per time window;
//   "stalloc-paper"    the published design: one offset-planned pool, a slab for requests of at
//                      most 512 B, a caching pool for everything the plan does not cover.
#pragma once

#include <memory>
#include <string_view>

#include "planner/trace/trace.h"
#include "sim/allocator_model.h"

namespace stalloc {

// variant is one of "stalloc", "stalloc-windowed", "stalloc-paper"; throws UsageError otherwise.
// The model plans the trace's iterations up front (once per distinct iteration signature).
std::unique_ptr<AllocatorModel> make_stalloc_model(const Trace& trace, std::string_view variant,
                                                   const ModelOptions& options);

}  // namespace stalloc
