// Greedy offset placement: buffers taken in one order, each put where it fits among the
// already-placed buffers that live at the same time. A portfolio of orderings x placement rules,
// because no single ordering wins on every input (size-descending is best on most, start-time
// order on long chains, conflict degree on dense cliques).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_conflict_index.h"
#include "planner/dsa/dsa_occupancy.h"

namespace stalloc::dsa_detail {

enum class Ordering { SizeDesc, LifetimeDesc, AreaDesc, ConflictDegreeDesc, StartTime };

enum class Placement {
  LowestOffset,  // the lowest offset where the buffer fits (first fit by address)
  BestFit,       // the smallest gap that holds it, else on top of everything it overlaps
};

struct PortfolioMember {
  Ordering ordering;
  Placement placement;
};

std::string member_name(const PortfolioMember& member);

// Every ordering with every placement rule; index 0 is plain best-fit-decreasing by size.
std::vector<PortfolioMember> default_portfolio();

std::vector<std::uint32_t> make_order(const std::vector<DsaBuffer>& buffers,
                                      const DsaConflictIndex& index, Ordering ordering);

// Offsets, parallel to buffers, honouring each buffer's alignment. The placed buffers a new one
// overlaps are found through an OccupancyTree (one over these buffers may be passed in to be
// reused; it is cleared first), so a buffer costs O(log^2 T + the address intervals of what
// it overlaps, merged) instead of its number of conflicts.
// With a deadline, returns an empty vector when it passes before every buffer is placed.
std::vector<std::uint64_t> place_in_order(
    const std::vector<DsaBuffer>& buffers, const std::vector<std::uint32_t>& order,
    Placement placement, OccupancyTree* tree = nullptr,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

// Where `tree` (holding the buffers placed so far) puts buffer i under `placement`: the lowest
// gap, or the tightest, that holds it, else above everything it overlaps. Does not insert it.
std::uint64_t choose_offset(const OccupancyTree& tree, std::size_t i, const DsaBuffer& b,
                            Placement placement);

// The same offsets, by visiting every buffer each new one overlaps (the first implementation,
// kept as the reference the tests compare with).
std::vector<std::uint64_t> place_in_order_by_conflicts(const std::vector<DsaBuffer>& buffers,
                                                       const DsaConflictIndex& index,
                                                       const std::vector<std::uint32_t>& order,
                                                       Placement placement);

// The same as place_in_order for an order by start time (make_order(..., StartTime)), by a
// sweep over time that needs no conflict index: O(n log n) for best fit.
std::vector<std::uint64_t> place_by_sweep(const std::vector<DsaBuffer>& buffers,
                                          const std::vector<std::uint32_t>& start_order,
                                          Placement placement);

std::uint64_t placement_peak(const std::vector<DsaBuffer>& buffers,
                             const std::vector<std::uint64_t>& offsets);

inline std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace stalloc::dsa_detail
