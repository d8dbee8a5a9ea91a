// Cutting an offset problem into independent parts, losing nothing but alignment padding:
//
// - Persistent buffers, live from the earliest start to the latest end, overlap every other
//   buffer. Any placement can be rearranged to stack them at the bottom with the same peak (lift
//   one out, lower everything above it by its size: the hole it leaves was free at every time;
//   then put it under everything), so they are stacked first and the rest is solved above them
//   (at an offset aligned for all of the rest, which may cost less than one alignment unit).
//   Training traces have many (weights, optimizer state), and they would otherwise tie every
//   iteration into one huge problem.
// - Time components: groups of buffers such that no lifetime crosses from one group into
//   another. Each can be placed from offset 0 on its own; the peak is the largest of theirs.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/dsa/dsa.h"

namespace stalloc::dsa_detail {

// Indices of the buffers live over the whole span of all of them, in input order. Every
// lifetime must be non-empty.
std::vector<std::uint32_t> persistent_buffers(const std::vector<DsaBuffer>& buffers);

// Index groups, each sorted by (start, index), in order of start time.
std::vector<std::vector<std::uint32_t>> split_components(const std::vector<DsaBuffer>& buffers);

}  // namespace stalloc::dsa_detail
