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
//
// A block that repeats is not always an iteration: a pipeline schedule's steady 1F1B phase
// repeats one micro-batch, at the peak, a dozen times per iteration (llama7b-tp4pp2vpp2: 2,010
// allocations, 13 times), and the detector finds it first. Such a period ends: its boundary key
// comes back at another distance, or not within twice the period. A period that ends before it
// has held kTrustedRepeats times is taken for part of an iteration: detection starts over and
// accepts only periods as long as the whole run of it. One that held longer is an iteration that changed once (an
// evaluation step, an extra tensor): it is kept.
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
  // Periods found and then dropped as parts of an iteration, and the last one dropped.
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t period_dropped() const { return dropped_period_; }

  static constexpr std::uint64_t kTrustedRepeats = 64;

 private:
  static constexpr std::size_t kCandidates = 8;
  bool detect();
  // Is the distance from the last boundary to the next (or, with none, the distance so far)
  // still the period's? Drops the period when not, while it is young.
  bool still_periodic(bool at_boundary);
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
  std::uint64_t repeats_ = 0;       // boundaries at the period's distance since it was found
  std::uint64_t min_period_ = 2;    // shorter periods were dropped as parts of an iteration
  std::uint64_t dropped_ = 0;
  std::uint64_t dropped_period_ = 0;
  bool given_up_ = false;
};

}  // namespace stalloc
