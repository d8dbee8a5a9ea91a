// stalloc's rows in the simulator are the runtime itself: stalloc::Runtime (src/), the code that
// serves PyTorch, driven through a trace on a host driver that keeps CUDA's books and checks
// every call but holds no memory. A separate model of the same policy drifted from it (77% in the
// model against 94% in `stalloc replay` on one real snapshot); this way the table shows what
// users run, the simulator and `stalloc replay` cannot disagree, and the driver's own counters
// give the calls per kind.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "trace/trace.h"
#include "sim/allocator_model.h"

namespace stalloc {

// name: the row's name ("stalloc", "stalloc-windowed"). conf: STALLOC_CONF for the runtime;
// `forced`: keys the row itself sets over conf (e.g. "mode:windowed"); options.granularity and
// options.capacity set its granularity and capacity unless conf does. Throws UsageError for a
// bad conf.
std::unique_ptr<AllocatorModel> make_runtime_model(std::string_view name, const std::string& conf,
                                                   const ModelOptions& options,
                                                   std::string_view forced = "");

}  // namespace stalloc
