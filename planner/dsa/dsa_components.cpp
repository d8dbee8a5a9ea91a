#include "planner/dsa/dsa_components.h"

#include <algorithm>
#include <numeric>

namespace stalloc::dsa_detail {

std::vector<std::uint32_t> persistent_buffers(const std::vector<DsaBuffer>& buffers) {
  std::vector<std::uint32_t> persistent;
  if (buffers.empty()) return persistent;
  std::uint64_t first = UINT64_MAX;
  std::uint64_t last = 0;
  for (const DsaBuffer& b : buffers) {
    first = std::min(first, b.lower);
    last = std::max(last, b.upper);
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].lower == first && buffers[i].upper == last) {
      persistent.push_back(static_cast<std::uint32_t>(i));
    }
  }
  return persistent;
}

std::vector<std::vector<std::uint32_t>> split_components(const std::vector<DsaBuffer>& buffers) {
  std::vector<std::uint32_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return buffers[a].lower < buffers[b].lower || (buffers[a].lower == buffers[b].lower && a < b);
  });
  std::vector<std::vector<std::uint32_t>> components;
  std::uint64_t reach = 0;
  for (std::uint32_t i : order) {
    if (components.empty() || buffers[i].lower >= reach) components.emplace_back();
    components.back().push_back(i);
    reach = std::max(reach, buffers[i].upper);
  }
  return components;
}

}  // namespace stalloc::dsa_detail
