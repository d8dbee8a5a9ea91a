// Helpers shared by the offset-planner tests: random instances and the independent check.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "planner/dsa/dsa.h"
#include "planner/dsa/placement_validator.h"

namespace stalloc::dsa_test {

inline PlacementReport check(const std::vector<DsaBuffer>& buffers,
                             const std::vector<std::uint64_t>& offsets) {
  std::vector<PlacedBuffer> placed;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const DsaBuffer& b = buffers[i];
    placed.push_back({b.id, b.lower, b.upper, b.size, b.alignment, offsets.at(i)});
  }
  return validate_placement(placed);
}

// Training-like lifetimes: mostly short activations, some long-lived weights and gradients,
// sizes spread over three orders of magnitude.
inline std::vector<DsaBuffer> random_buffers(std::size_t n, std::uint64_t seed,
                                             std::uint64_t alignment = 1) {
  std::mt19937_64 rng(seed);
  std::vector<DsaBuffer> buffers;
  const std::uint64_t horizon = 4 * n;
  for (std::size_t i = 0; i < n; ++i) {
    DsaBuffer b;
    b.id = i;
    b.lower = rng() % horizon;
    const bool long_lived = rng() % 20 == 0;
    const std::uint64_t length = long_lived ? 1 + rng() % (horizon / 2) : 1 + rng() % 40;
    b.upper = b.lower + length;
    b.size = (1 + rng() % 1000) << (rng() % 3 * 4);
    b.alignment = alignment;
    buffers.push_back(b);
  }
  return buffers;
}

}  // namespace stalloc::dsa_test
