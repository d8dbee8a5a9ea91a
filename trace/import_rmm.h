// Import of an RMM logging_resource_adaptor CSV: Thread,Time,Action,Pointer,Size,Stream.
#pragma once

#include <string>
#include <string_view>

#include "trace/trace.h"

namespace stalloc {

// "allocate failure" rows are skipped and counted in meta skipped_failures; frees of pointers
// never allocated in the log are skipped and counted in meta skipped_unknown_frees.
Trace import_rmm_log(std::string_view csv, const std::string& input_name);

}  // namespace stalloc
