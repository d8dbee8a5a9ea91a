// PYTORCH_CUDA_ALLOC_CONF parsing on any string either gives options or raises UsageError.
#include <cstddef>
#include <cstdint>

#include "common/error.h"
#include "sim/pytorch_alloc_conf.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  try {
    PytorchAllocConf conf = parse_pytorch_alloc_conf(fuzz::as_text(data, size));
    for (std::uint64_t request = 1; request != 0 && request <= (1ull << 40); request <<= 3) {
      (void)roundup_divisions_for(conf, request);
    }
  } catch (const UsageError&) {
  }
  return 0;
}
