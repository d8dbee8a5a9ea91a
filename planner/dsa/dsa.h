// The offset (dynamic storage allocation) problem: buffers with a lifetime [lower, upper) and a
// size get offsets so that no two buffers live at the same time overlap, with the peak
// (max offset + size) as small as possible. Used for MiniMalloc-style CSV problems, for the
// paper's single-pool plan (--mode offset), and for packing small tensors and chunk tails in the
// physical-chunk planner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stalloc {

struct DsaBuffer {
  std::uint64_t id = 0;
  std::uint64_t lower = 0;  // first time the buffer is live
  std::uint64_t upper = 0;  // first time it is dead again (half-open)
  std::uint64_t size = 0;
  std::uint64_t alignment = 1;  // offset must be a multiple of this (a power of two)
};

struct DsaProblem {
  std::vector<DsaBuffer> buffers;
  std::uint64_t capacity = 0;  // 0: no capacity, minimise the peak only
};

struct DsaOptions {
  double time_limit_seconds = 10.0;  // for the search after the portfolio
  std::uint64_t seed = 1;            // the result is deterministic for a seed
  bool parallel = true;              // run the portfolio with oneTBB where available
};

struct DsaSolution {
  std::vector<std::uint64_t> offsets;   // parallel to problem.buffers
  std::uint64_t peak_bytes = 0;         // max over buffers of offset + size
  std::uint64_t lower_bound_bytes = 0;  // max over time of live bytes
  bool within_capacity = true;          // peak <= capacity (true when capacity is 0)
  std::string strategy;                 // which heuristic or search produced it
  double milliseconds = 0;
};

// Max over time of the sum of sizes of the live buffers.
std::uint64_t dsa_lower_bound(const DsaProblem& problem);

DsaSolution solve_dsa(const DsaProblem& problem, const DsaOptions& options = {});

}  // namespace stalloc
