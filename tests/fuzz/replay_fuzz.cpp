// Traces that are well formed in shape but may lie, replayed by the runtime with every pattern
// checked: the input is a program of allocations (sizes from 1 byte to 4 MiB, or one near 2^64),
// frees (now and then with another size or stream than the allocation's), record_stream-like
// stream changes and iteration boundaries, over four streams and two threads. A trace that
// validate_trace refuses must be refused (that is its lie); one it accepts is replayed on the
// host emulation under a capacity and must verify: no pattern broken, no memory unmapped or shared
// while GPU work may use it, and at the end nothing left allocated.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/runtime.h"
#include "src/trace_replayer.h"
#include "tests/fuzz/fuzz_input.h"
#include "vmm/host_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  constexpr std::size_t kMaxEvents = 1500;
  Trace trace;
  std::vector<Event> live;
  std::uint64_t next_id = 1;
  std::uint32_t iteration = 0;
  for (std::size_t i = 0; i + 2 < size && trace.events.size() < kMaxEvents; i += 3) {
    const std::uint8_t op = data[i];
    const std::uint16_t arg = static_cast<std::uint16_t>(data[i + 1] | (data[i + 2] << 8));
    Event e;
    e.iteration = iteration;
    if (op < 120 || live.empty()) {
      e.kind = EventKind::Alloc;
      e.id = next_id++;
      e.size = op == 119 ? ~std::uint64_t{0} - arg  // a size no device holds
               : op % 3 == 0 ? 1 + arg % 4096
               : op % 3 == 1 ? std::uint64_t{arg} * 64
                             : static_cast<std::uint64_t>(arg % 64 + 1) << 16;
      e.stream = op % 4;
      e.thread = static_cast<std::uint16_t>(op % 7 == 0);
      live.push_back(e);
      trace.events.push_back(e);
    } else if (op < 240) {
      const std::size_t k = arg % live.size();
      e = live[k];
      e.kind = EventKind::Free;
      e.iteration = iteration;
      if (op == 238) e.size += 1 + arg % 512;  // a free that lies about the size
      if (op == 239) e.stream = (e.stream + 1) % 4;  // or about the stream
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      trace.events.push_back(e);
    } else {
      ++iteration;
    }
  }
  for (Event e : live) {  // freed at the end, so that the replay can check nothing is left
    e.kind = EventKind::Free;
    e.iteration = iteration;
    trace.events.push_back(e);
  }
  if (!validate_trace(trace).empty()) return 0;  // refused: the lie was named

  vmm::HostDriverOptions options;
  options.granularity = 64 << 10;
  options.max_bytes = 48 << 20;
  auto driver = vmm::make_host_driver(options);
  RuntimeConfig config = parse_runtime_config("backend:host,auto_step:false,capacity:32MiB");
  ReplayResult result;
  std::uint64_t left = 0;
  {
    Runtime runtime(config, *driver);
    ReplayOptions replay;
    replay.verify = true;
    result = replay_trace(runtime, trace, replay);
    left = runtime.stats().allocated_bytes;
    fuzz::require(runtime.stats().driver.unguarded_uses == 0);
  }
  fuzz::require(result.verify_errors == 0);
  fuzz::require(result.unmapped_uses == 0);
  fuzz::require(left == 0);
  fuzz::require(driver->counters().live_chunks == 0 && driver->counters().live_mappings == 0);
  return 0;
}
