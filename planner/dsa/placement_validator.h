// An independent check of an offset placement. It shares no code with the planners on purpose:
// a bug in their overlap logic must not be able to hide itself here. It sweeps time once,
// keeping the live buffers ordered by offset, so each new buffer is compared with its two
// neighbours in address order: O(n log n).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stalloc {

struct PlacedBuffer {
  std::uint64_t id = 0;
  std::uint64_t lower = 0;  // live over [lower, upper)
  std::uint64_t upper = 0;
  std::uint64_t size = 0;
  std::uint64_t alignment = 1;
  std::uint64_t offset = 0;
};

struct PlacementReport {
  bool ok = true;
  std::string error;           // what is wrong, empty when ok
  std::uint64_t first_id = 0;  // the conflict (or the misaligned buffer in first_id)
  std::uint64_t second_id = 0;
  std::uint64_t peak_bytes = 0;  // max over buffers of offset + size, recomputed
};

PlacementReport validate_placement(const std::vector<PlacedBuffer>& buffers);

}  // namespace stalloc
