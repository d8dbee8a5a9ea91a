// A memory snapshot in the layout of PyTorch's torch.cuda.memory._snapshot(), pickled, so that
// pytorch.org/memory_viz shows the runtime's segments and its allocation timeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stalloc {

struct SnapshotBlock {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t requested_size = 0;
  bool active = false;  // "active_allocated", else "inactive"
};

struct SnapshotSegment {
  std::uint64_t address = 0;
  std::uint64_t total_size = 0;
  std::uint64_t stream = 0;
  bool small = false;  // segment_type "small" (small packed arena) or "large"
  std::vector<SnapshotBlock> blocks;  // any order; gaps are written as inactive blocks
};

struct SnapshotAction {
  bool alloc = true;  // "alloc", else "free_completed"
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::int64_t time_us = 0;
};

std::string memory_snapshot_pickle(int device, const std::vector<SnapshotSegment>& segments,
                                   const std::vector<SnapshotAction>& actions);

}  // namespace stalloc
