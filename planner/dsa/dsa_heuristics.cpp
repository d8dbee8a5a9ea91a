#include "planner/dsa/dsa_heuristics.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <utility>

namespace stalloc::dsa_detail {

namespace {

const char* ordering_name(Ordering o) {
  switch (o) {
    case Ordering::SizeDesc:
      return "size";
    case Ordering::LifetimeDesc:
      return "lifetime";
    case Ordering::AreaDesc:
      return "area";
    case Ordering::ConflictDegreeDesc:
      return "conflicts";
    case Ordering::StartTime:
      return "start";
  }
  return "?";
}

}  // namespace

std::string member_name(const PortfolioMember& member) {
  return std::string(ordering_name(member.ordering)) +
         (member.placement == Placement::LowestOffset ? "/lowest-offset" : "/best-fit");
}

std::vector<PortfolioMember> default_portfolio() {
  std::vector<PortfolioMember> members;
  for (Placement p : {Placement::BestFit, Placement::LowestOffset}) {
    for (Ordering o : {Ordering::SizeDesc, Ordering::LifetimeDesc, Ordering::AreaDesc,
                       Ordering::ConflictDegreeDesc, Ordering::StartTime}) {
      members.push_back({o, p});
    }
  }
  return members;
}

std::vector<std::uint32_t> make_order(const std::vector<DsaBuffer>& buffers,
                                      const DsaConflictIndex& index, Ordering ordering) {
  const std::size_t n = buffers.size();
  // Sort keys, largest first; ties fall back to size, then lifetime, then input position.
  std::vector<std::pair<double, std::uint32_t>> keys(n);
  for (std::size_t i = 0; i < n; ++i) {
    const DsaBuffer& b = buffers[i];
    const auto length = static_cast<double>(b.upper - b.lower);
    const auto size = static_cast<double>(b.size);
    double key = 0;
    switch (ordering) {
      case Ordering::SizeDesc:
        key = size;
        break;
      case Ordering::LifetimeDesc:
        key = length;
        break;
      case Ordering::AreaDesc:
        key = size * length;
        break;
      case Ordering::ConflictDegreeDesc:
        key = static_cast<double>(index.degree(i));
        break;
      case Ordering::StartTime:
        key = -static_cast<double>(b.lower);
        break;
    }
    keys[i] = {key, static_cast<std::uint32_t>(i)};
  }
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (keys[a].first != keys[b].first) return keys[a].first > keys[b].first;
    if (buffers[a].size != buffers[b].size) return buffers[a].size > buffers[b].size;
    const std::uint64_t la = buffers[a].upper - buffers[a].lower;
    const std::uint64_t lb = buffers[b].upper - buffers[b].lower;
    if (la != lb) return la > lb;
    return a < b;
  });
  return order;
}

std::uint64_t choose_offset(const OccupancyTree& tree, std::size_t i, const DsaBuffer& b,
                            Placement placement) {
  std::uint64_t chosen = 0;
  bool found = false;
  std::uint64_t best_gap = 0;
  const std::uint64_t top = tree.scan(i, [&](std::uint64_t begin, std::uint64_t end) {
    const std::uint64_t at = align_up(begin, b.alignment);
    if (at + b.size > end) return true;
    if (placement == Placement::LowestOffset) {
      chosen = at;
      found = true;
      return false;
    }
    if (!found || end - begin < best_gap) {
      chosen = at;
      best_gap = end - begin;
      found = true;
    }
    return true;
  });
  return found ? chosen : align_up(top, b.alignment);
}

std::vector<std::uint64_t> place_in_order(const std::vector<DsaBuffer>& buffers,
                                          const std::vector<std::uint32_t>& order,
                                          Placement placement, OccupancyTree* tree,
                                          std::chrono::steady_clock::time_point deadline) {
  const bool timed = deadline != std::chrono::steady_clock::time_point::max();
  std::size_t count = 0;
  std::optional<OccupancyTree> own;
  if (tree == nullptr) tree = &own.emplace(buffers);
  tree->clear();
  std::vector<std::uint64_t> offsets(buffers.size(), 0);
  for (std::uint32_t i : order) {
    if (timed && (++count & 1023) == 0 && std::chrono::steady_clock::now() >= deadline) return {};
    offsets[i] = choose_offset(*tree, i, buffers[i], placement);
    tree->insert(i, offsets[i]);
  }
  return offsets;
}

std::vector<std::uint64_t> place_in_order_by_conflicts(const std::vector<DsaBuffer>& buffers,
                                                       const DsaConflictIndex& index,
                                                       const std::vector<std::uint32_t>& order,
                                                       Placement placement) {
  std::vector<std::uint64_t> offsets(buffers.size(), 0);
  std::vector<char> placed(buffers.size(), 0);
  std::vector<std::pair<std::uint64_t, std::uint64_t>>
      occupied;  // [begin, end) in the address space
  for (std::uint32_t i : order) {
    const DsaBuffer& b = buffers[i];
    occupied.clear();
    index.for_each_conflict(i, [&](std::size_t j) {
      if (placed[j] != 0) occupied.emplace_back(offsets[j], offsets[j] + buffers[j].size);
    });
    std::sort(occupied.begin(), occupied.end());
    std::uint64_t cursor = 0;  // everything below is taken or already scanned
    std::uint64_t chosen = 0;
    bool found = false;
    std::uint64_t best_gap = 0;
    for (const auto& [begin, end] : occupied) {
      const std::uint64_t at = align_up(cursor, b.alignment);
      if (at + b.size <= begin) {
        const std::uint64_t gap = begin - cursor;
        if (placement == Placement::LowestOffset) {
          chosen = at;
          found = true;
          break;
        }
        if (!found || gap < best_gap) {
          chosen = at;
          best_gap = gap;
          found = true;
        }
      }
      cursor = std::max(cursor, end);
    }
    offsets[i] = found ? chosen : align_up(cursor, b.alignment);
    placed[i] = 1;
  }
  return offsets;
}

std::uint64_t placement_peak(const std::vector<DsaBuffer>& buffers,
                             const std::vector<std::uint64_t>& offsets) {
  std::uint64_t peak = 0;
  for (std::size_t i = 0; i < buffers.size(); ++i)
    peak = std::max(peak, offsets[i] + buffers[i].size);
  return peak;
}

}  // namespace stalloc::dsa_detail
