#include "planner/dsa/placement_validator.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>

namespace stalloc {

namespace {

std::string describe(const PlacedBuffer& b) {
  return "buffer " + std::to_string(b.id) + " [" + std::to_string(b.offset) + ", " +
         std::to_string(b.offset + b.size) + ") live [" + std::to_string(b.lower) + ", " +
         std::to_string(b.upper) + ")";
}

PlacementReport conflict(const PlacedBuffer& a, const PlacedBuffer& b, std::uint64_t peak) {
  PlacementReport report;
  report.ok = false;
  report.peak_bytes = peak;
  report.first_id = a.id;
  report.second_id = b.id;
  report.error = describe(a) + " overlaps " + describe(b);
  return report;
}

}  // namespace

PlacementReport validate_placement(const std::vector<PlacedBuffer>& buffers) {
  PlacementReport report;
  for (const PlacedBuffer& b : buffers) {
    if (b.alignment == 0 || (b.alignment & (b.alignment - 1)) != 0 || b.offset % b.alignment != 0) {
      report.ok = false;
      report.first_id = b.id;
      report.error = describe(b) + " is not aligned to " + std::to_string(b.alignment);
      return report;
    }
    if (b.size > std::numeric_limits<std::uint64_t>::max() - b.offset) {
      report.ok = false;
      report.first_id = b.id;
      report.error = describe(b) + " ends beyond 2^64";
      return report;
    }
    report.peak_bytes = std::max(report.peak_bytes, b.offset + b.size);
  }

  // (time, 0 = ends / 1 = starts, index): at one time, ends go first (lifetimes are half-open).
  std::vector<std::tuple<std::uint64_t, int, std::size_t>> events;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].size == 0 || buffers[i].lower >= buffers[i].upper) continue;
    events.emplace_back(buffers[i].lower, 1, i);
    events.emplace_back(buffers[i].upper, 0, i);
  }
  std::sort(events.begin(), events.end());
  std::map<std::uint64_t, std::size_t> live;  // offset -> buffer; disjoint while no conflict
  for (const auto& [time, starts, i] : events) {
    const PlacedBuffer& b = buffers[i];
    if (starts == 0) {
      live.erase(b.offset);
      continue;
    }
    auto above = live.lower_bound(b.offset);
    if (above != live.end() && above->first < b.offset + b.size) {
      return conflict(buffers[above->second], b, report.peak_bytes);
    }
    if (above != live.begin()) {
      const PlacedBuffer& below = buffers[std::prev(above)->second];
      if (below.offset + below.size > b.offset) return conflict(below, b, report.peak_bytes);
    }
    live.emplace(b.offset, i);
  }
  return report;
}

}  // namespace stalloc
