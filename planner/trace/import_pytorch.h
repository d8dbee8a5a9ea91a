// Import of a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot), read with the safe
// unpickler: only "device_traces" is used (docs/formats.md, "Importers").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "planner/trace/trace.h"

namespace stalloc {

// One trace per device whose trace has at least one alloc or free, in device order; each
// trace's `device` is its index in device_traces. `input_name` goes into errors and meta input.
std::vector<Trace> import_pytorch_snapshot(std::string_view pickle_bytes, const std::string& input_name);

}  // namespace stalloc
