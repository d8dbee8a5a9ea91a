// PyTorch snapshots that are valid pickles of the right shape but whose contents lie: allocs at
// addresses still live, frees of addresses never allocated, free sizes that differ from the
// block's, requested sizes above the block's, segments that disagree with the trace, OOM entries
// with any size and free memory, time stamps that go back, sizes near 2^64. The input is a
// program that writes such a snapshot (src/pickle_writer.h); the importer must either refuse it
// (ParseError) or return traces that are well formed, with every size within what a device holds.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "src/pickle_writer.h"
#include "tests/fuzz/fuzz_input.h"
#include "trace/import_pytorch.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  auto byte = [&](std::size_t i) { return i < size ? data[i] : std::uint8_t{0}; };
  auto number = [&](std::size_t i) {
    // Small, page-like or huge: the sizes a lying snapshot would carry.
    const std::uint8_t kind = byte(i);
    const std::uint64_t v = byte(i + 1) | (std::uint64_t{byte(i + 2)} << 8);
    if (kind < 200) return v * 512;
    if (kind < 250) return v << 20;
    return std::uint64_t{0x7fffffffffffffff} - v;
  };
  PickleWriter w;
  w.begin_dict();
  w.str("segments").begin_list();
  const std::size_t segments = byte(0) % 4;
  for (std::size_t s = 0; s < segments; ++s) {
    const std::size_t at = 1 + s * 8;
    w.begin_dict().field("device", 0).field("address", (byte(at) + 1) * std::uint64_t{1 << 24});
    w.field("total_size", number(at + 1)).field("stream", 0);
    w.str("blocks").begin_list();
    w.begin_dict().field("address", (byte(at) + 1) * std::uint64_t{1 << 24}).field("size", number(at + 4));
    w.field("requested_size", number(at + 5)).field("state", byte(at + 7) % 2 ? "active_allocated" : "inactive");
    w.end_dict().end_list().end_dict();
  }
  w.end_list();
  w.str("device_traces").begin_list().begin_list();
  std::int64_t time_us = 1000;
  for (std::size_t i = 40; i + 4 < size && i < 40 + 4 * 2000; i += 4) {
    const std::uint8_t op = byte(i);
    const std::uint64_t addr = (byte(i + 1) % 32 + 1) * std::uint64_t{1 << 20};
    time_us += op % 17 == 0 ? -5 : 3;  // now and then time goes back
    w.begin_dict();
    if (op < 110) {
      w.field("action", "alloc").field("addr", addr).field("size", number(i + 2));
    } else if (op < 220) {
      w.field("action", op % 2 ? "free_completed" : "free_requested").field("addr", addr);
      w.field("size", number(i + 2));
    } else if (op < 240) {
      w.field("action", op % 2 ? "segment_map" : "segment_unmap").field("addr", addr).field("size", number(i + 2));
    } else {
      w.field("action", "oom").field("size", number(i + 1)).field("device_free", number(i + 2));
    }
    w.field("stream", static_cast<std::int64_t>(op % 3)).field("time_us", time_us);
    w.end_dict();
  }
  w.end_list().end_list();
  w.str("allocator_settings").begin_dict().field("expandable_segments", byte(1) % 2 == 0).end_dict();
  w.end_dict();
  std::vector<Trace> traces;
  try {
    traces = import_pytorch_snapshot(w.finish(), "lying.pickle");
  } catch (const ParseError&) {
    return 0;
  }
  for (const Trace& t : traces) {
    fuzz::require_well_formed(t);
    for (const Event& e : t.events) fuzz::require(e.size <= kMaxTraceBytes);
  }
  return 0;
}
