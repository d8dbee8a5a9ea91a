// Runtime's views of what it holds and did: the recorded trace (stalloc inspect/plan/sim read
// it) and a memory snapshot in PyTorch's layout (pytorch.org/memory_viz).
#include <algorithm>
#include <fstream>

#include "src/memory_snapshot.h"
#include "src/runtime.h"
#include "trace/trace_io.h"

namespace stalloc {

void Runtime::save_trace(const std::string& path) const {
  std::lock_guard lock(mutex_);
  write_trace(lifecycle_.recorder().retained_trace(driver_.device(), lifecycle_.current_kept()),
              path);
}

std::string Runtime::snapshot_pickle() const {
  std::lock_guard lock(mutex_);
  std::vector<SnapshotSegment> segments;
  // A plan's views share the pool's chunks: listing every view would count a chunk once per
  // view it appears in (100k views at G = 2 MiB). Only views holding live tensors are listed;
  // idle pool chunks appear in no segment (stats() has the pool's size).
  for (const auto& plan : cache_.installed()) {
    for (const InstalledPlan::ViewInfo& view : plan->views()) {
      const bool live = std::any_of(view.slots.begin(), view.slots.end(),
                                    [&](std::uint32_t k) { return plan->slot(k).live; });
      if (!live) continue;
      SnapshotSegment seg;
      seg.address = view.base;
      seg.total_size = view.pages * granularity_;
      const std::uint32_t stream = plan->plan().slots[view.slots.front()].stream;
      seg.stream = stream < sync_.streams() ? sync_.handle_of(stream) : 0;
      for (std::uint32_t k : view.slots) {
        const SlotState& slot = plan->slot(k);
        if (!slot.live) continue;
        // A Dynamic slot's tensor takes as much of its view as it asked for.
        const PlannedSlot& planned = plan->plan().slots[k];
        const std::uint64_t bytes =
            planned.kind == SlotKind::Dynamic ? slot.tenant_size : planned.size;
        seg.blocks.push_back({plan->address(k), bytes, slot.tenant_size, true});
      }
      segments.push_back(std::move(seg));
    }
  }
  unplanned_.append_segments(sync_, &segments);
  std::vector<SnapshotAction> actions;
  for (const auto& r : lifecycle_.recorder().all_requests()) {
    actions.push_back({r.event.kind == EventKind::Alloc, r.address, r.event.size,
                       static_cast<std::uint64_t>(r.event.stream < sync_.streams()
                                                      ? sync_.handle_of(r.event.stream)
                                                      : 0),
                       r.event.time_ns < 0 ? 0 : r.event.time_ns / 1000});
  }
  return memory_snapshot_pickle(driver_.device(), segments, actions);
}

void Runtime::save_snapshot(const std::string& path) const {
  const std::string bytes = snapshot_pickle();
  std::ofstream out(path, std::ios::binary);
  if (!out) throw UsageError("cannot write " + path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace stalloc
