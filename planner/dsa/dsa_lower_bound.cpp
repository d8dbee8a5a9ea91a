#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "planner/dsa/dsa.h"

namespace stalloc {

std::uint64_t dsa_lower_bound(const DsaProblem& problem) {
  // Lifetimes are half-open, so at equal times a release is applied before an allocation.
  std::vector<std::tuple<std::uint64_t, int, std::uint64_t>>
      sweep;  // (time, 0 release / 1 alloc, size)
  sweep.reserve(problem.buffers.size() * 2);
  for (const DsaBuffer& b : problem.buffers) {
    if (b.size == 0 || b.lower >= b.upper) continue;
    sweep.emplace_back(b.lower, 1, b.size);
    sweep.emplace_back(b.upper, 0, b.size);
  }
  std::sort(sweep.begin(), sweep.end());
  std::uint64_t live = 0;
  std::uint64_t peak = 0;
  for (const auto& [time, is_alloc, size] : sweep) {
    if (is_alloc != 0) {
      live += size;
      peak = std::max(peak, live);
    } else {
      live -= size;
    }
  }
  return peak;
}

}  // namespace stalloc
