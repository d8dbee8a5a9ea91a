// Finds iteration boundaries for a program that never calls step(). Training repeats its
// request sequence every iteration, so the sequence becomes periodic; the detector looks for
// the last 2p allocations forming two identical blocks. An allocation's key is (size, stream,
// live allocations at that moment): the live count tells a whole iteration apart from the
// repeated layers inside it, whose sizes repeat but whose live counts grow (forward) or shrink
// (backward). A block must also reach the highest live count seen, which excludes loops of the
// optimizer step. Candidate periods come from the last few occurrences of the same key; blocks
// are compared in O(1) with prefix hashes.
//
// Once found, the boundary is put where the live count is lowest in the block (after the
// optimizer step, before the next forward), and from then on an allocation with the boundary's
// key, at least half a period after the last boundary, starts an iteration.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace stalloc {

class PeriodDetector {
 public:
  // Detection is abandoned after this many allocations without a period.
  static constexpr std::size_t kMaxHistory = std::size_t{1} << 22;

  // Called before serving each allocation; true when an iteration starts with it.
  bool boundary_before(std::uint64_t size, std::uint32_t stream, std::uint64_t live_allocations);

  bool found() const { return period_ != 0; }
  std::uint64_t period() const { return period_; }

 private:
  static constexpr std::size_t kCandidates = 8;
  bool detect();
  std::uint64_t block_hash(std::size_t begin, std::size_t end) const;

  std::vector<std::uint64_t> keys_;
  std::vector<std::uint64_t> live_;
  std::vector<std::uint64_t> prefix_{0};
  std::vector<std::uint64_t> power_{1};
  std::unordered_map<std::uint64_t, std::array<std::uint64_t, kCandidates>> seen_;
  std::unordered_map<std::uint64_t, std::uint8_t> seen_count_;
  std::uint64_t max_live_ = 0;
  std::uint64_t period_ = 0;
  std::uint64_t boundary_key_ = 0;
  std::uint64_t since_boundary_ = 0;
  bool given_up_ = false;
};

}  // namespace stalloc
