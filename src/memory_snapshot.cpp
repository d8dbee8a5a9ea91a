#include "src/memory_snapshot.h"

#include <algorithm>

#include "src/pickle_writer.h"

namespace stalloc {
namespace {

// PyTorch's blocks tile their segment: the bytes no block covers become inactive blocks.
std::vector<SnapshotBlock> tiled(const SnapshotSegment& s) {
  std::vector<SnapshotBlock> blocks = s.blocks;
  std::sort(blocks.begin(), blocks.end(),
            [](const SnapshotBlock& a, const SnapshotBlock& b) { return a.address < b.address; });
  std::vector<SnapshotBlock> out;
  std::uint64_t at = s.address;
  for (const SnapshotBlock& b : blocks) {
    if (b.address > at) out.push_back({at, b.address - at, 0, false});
    out.push_back(b);
    at = std::max(at, b.address + b.size);
  }
  if (at < s.address + s.total_size) out.push_back({at, s.address + s.total_size - at, 0, false});
  return out;
}

}  // namespace

std::string memory_snapshot_pickle(int device, const std::vector<SnapshotSegment>& segments,
                                   const std::vector<SnapshotAction>& actions) {
  PickleWriter w;
  w.begin_dict();
  w.str("segments").begin_list();
  for (const SnapshotSegment& s : segments) {
    std::uint64_t allocated = 0;
    std::uint64_t requested = 0;
    for (const SnapshotBlock& b : s.blocks) {
      if (!b.active) continue;
      allocated += b.size;
      requested += b.requested_size;
    }
    w.begin_dict();
    w.field("device", device).field("address", s.address).field("total_size", s.total_size);
    w.field("allocated_size", allocated).field("active_size", allocated);
    w.field("requested_size", requested).field("stream", s.stream);
    w.field("segment_type", s.small ? "small" : "large");
    w.field("segment_pool_id", "").field("is_expandable", false);
    w.str("frames").begin_list().end_list();
    w.str("blocks").begin_list();
    for (const SnapshotBlock& b : tiled(s)) {
      w.begin_dict();
      w.field("address", b.address).field("size", b.size);
      w.field("requested_size", b.requested_size);
      w.field("state", b.active ? "active_allocated" : "inactive");
      w.str("frames").begin_list().end_list();
      w.end_dict();
    }
    w.end_list();
    w.end_dict();
  }
  w.end_list();
  w.str("device_traces").begin_list();
  for (int d = 0; d <= device; ++d) {
    w.begin_list();
    if (d == device) {
      for (const SnapshotAction& a : actions) {
        w.begin_dict();
        w.field("action", a.alloc ? "alloc" : "free_completed");
        w.field("addr", a.address).field("size", a.size).field("stream", a.stream);
        w.field("time_us", a.time_us);
        w.str("frames").begin_list().end_list();
        w.end_dict();
      }
    }
    w.end_list();
  }
  w.end_list();
  w.end_dict();
  return w.finish();
}

}  // namespace stalloc
