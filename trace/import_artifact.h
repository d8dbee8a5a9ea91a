// Import of the STAlloc artifact's allocation trace: "1 PTR SIZE STREAM" / "0 PTR SIZE STREAM"
// lines with "Iteration Index : N" and "micro-batch : F|B" markers (docs/formats.md).
#pragma once

#include <string>
#include <string_view>

#include "trace/trace.h"

namespace stalloc {

Trace import_stalloc_artifact(std::string_view text, const std::string& input_name);

}  // namespace stalloc
