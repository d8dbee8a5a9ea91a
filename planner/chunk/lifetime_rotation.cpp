#include "planner/chunk/lifetime_rotation.h"

#include <algorithm>

namespace stalloc {

std::vector<std::pair<std::uint64_t, std::uint64_t>> rotate_lifetimes(std::vector<PlannedSlot>& slots,
                                                                      std::uint64_t requests) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> original;
  original.reserve(slots.size());
  std::uint64_t t0 = 0;
  for (const PlannedSlot& s : slots) {
    original.emplace_back(s.start, s.end);
    if (s.end > requests) t0 = std::max(t0, s.end - requests);
  }
  if (t0 == 0) return original;
  for (PlannedSlot& s : slots) {
    if (s.end > requests) {
      // [a, T + f) with f <= t0: contiguous from a - t0 when a >= t0.
      if (s.start >= t0) {
        s.end = s.end - t0;
        s.start -= t0;
      } else {
        s.start = 0;
        s.end = requests;
      }
    } else if (s.start >= t0) {
      s.start -= t0;
      s.end -= t0;
    } else if (s.end <= t0) {
      s.start += requests - t0;
      s.end += requests - t0;
    } else {
      s.start = 0;  // live across t0: wraps in the rotated timeline
      s.end = requests;
    }
  }
  return original;
}

void restore_lifetimes(std::vector<PlannedSlot>& slots,
                       const std::vector<std::pair<std::uint64_t, std::uint64_t>>& original) {
  for (std::size_t i = 0; i < slots.size(); ++i) {
    slots[i].start = original[i].first;
    slots[i].end = original[i].second;
  }
}

}  // namespace stalloc
