// Import of a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot), read with the safe
// unpickler (docs/formats.md, "Importers"): the allocs and frees of "device_traces", blocks
// live before recording began (frees of unseen blocks, active blocks of the dump-time
// "segments") seeded at the start, iterations found from the allocation sequence
// (iteration_finder.h), and counts in meta of everything else.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trace/trace.h"

namespace stalloc {

// One trace per device whose trace has at least one alloc or free, in device order; each
// trace's `device` is its index in device_traces. `input_name` goes into errors and meta input.
// Throws ParseError naming the file, the entry and what was expected.
std::vector<Trace> import_pytorch_snapshot(std::string_view pickle_bytes, const std::string& input_name);

// The first bytes of a file are a pickle of protocol 2 or later, as torch.cuda.memory's
// _dump_snapshot writes (the PROTO opcode and its version).
bool looks_like_pickle(std::string_view head);

}  // namespace stalloc
