// A plan file that parses is installed in a runtime on a host driver (64 KiB chunks, 16 MiB at
// most) and its slots are requested once: installing either succeeds or raises UsageError, and
// every request either returns memory that can be written in full or nullptr. A plan file is
// input from outside (stalloc replay --plan, add_plan), so a malformed one must not make the
// runtime touch memory it does not own.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "planner/chunk/chunk_plan.h"
#include "src/runtime.h"
#include "tests/fuzz/fuzz_input.h"
#include "vmm/host_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  constexpr std::size_t kMaxRequest = 4u << 20;
  constexpr std::size_t kMaxRequests = 64;
  std::istringstream in{std::string(fuzz::as_text(data, size))};
  ChunkPlan plan;
  try {
    plan = read_plan(in, "fuzz.plan");
  } catch (const ParseError&) {
    return 0;
  }
  if (plan.num_chunks > 4096) return 0;  // the pool is created at install: keep inputs cheap
  std::vector<std::pair<std::uint64_t, std::uint32_t>> requests;
  for (const PlannedSlot& s : plan.slots) {
    if (requests.size() == kMaxRequests) break;
    requests.emplace_back(s.size, s.stream);
  }
  vmm::HostDriverOptions options;
  options.granularity = 64 << 10;
  options.max_bytes = 16 << 20;
  auto driver = vmm::make_host_driver(options);
  Runtime runtime(parse_runtime_config("backend:host,auto_step:false,profile_iterations:100"), *driver);
  try {
    runtime.add_plan(std::move(plan));
  } catch (const UsageError&) {
    return 0;
  }
  runtime.step();
  std::vector<std::pair<void*, std::size_t>> live;
  for (const auto& [bytes, stream] : requests) {
    if (bytes == 0 || bytes > kMaxRequest) continue;
    void* p = runtime.malloc(bytes, 0, stream);
    if (p == nullptr) continue;
    std::memset(p, 0x5a, bytes);
    live.emplace_back(p, bytes);
  }
  for (const auto& [p, bytes] : live) {
    fuzz::require(static_cast<unsigned char*>(p)[bytes - 1] == 0x5a);
    runtime.free(p, bytes, 0, 0);
  }
  return 0;
}
