#include "src/period_detector.h"

#include <algorithm>

namespace stalloc {
namespace {

constexpr std::uint64_t kBase = 0x9e3779b97f4a7c15ull;

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

std::uint64_t key_of(std::uint64_t size, std::uint32_t stream, std::uint64_t live) {
  return mix(mix(size) ^ (mix(stream + 0x51ull) * 3) ^ (mix(live + 0x1234ull) * 7));
}

}  // namespace

std::uint64_t PeriodDetector::block_hash(std::size_t begin, std::size_t end) const {
  return prefix_[end] - prefix_[begin] * power_[end - begin];
}

bool PeriodDetector::boundary_before(std::uint64_t size, std::uint32_t stream,
                                     std::uint64_t live_allocations) {
  const std::uint64_t key = key_of(size, stream, live_allocations);
  if (period_ != 0) {
    ++since_boundary_;
    const bool at_boundary = key == boundary_key_ && since_boundary_ > period_ / 2;
    if (!at_boundary && since_boundary_ <= 2 * period_) return false;
    if (still_periodic(at_boundary)) {
      if (!at_boundary) return false;
      since_boundary_ = 1;
      return true;
    }
    // Dropped: this allocation is the first of the new search.
  }
  if (given_up_) return false;
  keys_.push_back(key);
  live_.push_back(live_allocations);
  prefix_.push_back(prefix_.back() * kBase + key);
  power_.push_back(power_.back() * kBase);
  if (live_allocations > max_live_) max_live_ = live_allocations;
  if (detect()) return false;
  auto& positions = seen_[key];
  auto& count = seen_count_[key];
  positions[count % kCandidates] = keys_.size() - 1;
  ++count;
  if (count == 2 * kCandidates) count = kCandidates;
  if (keys_.size() >= kMaxHistory) {
    given_up_ = true;
    keys_ = {};
    live_ = {};
    prefix_ = {};
    power_ = {};
    seen_ = {};
    seen_count_ = {};
  }
  return false;
}

bool PeriodDetector::still_periodic(bool at_boundary) {
  // since_boundary_ counts the last boundary's allocation and this one.
  const std::uint64_t d = since_boundary_ - 1;
  const bool kept = at_boundary && 4 * (d > period_ ? d - period_ : period_ - d) <= period_;
  if (kept) {
    ++repeats_;
    return true;
  }
  if (repeats_ >= kTrustedRepeats) {
    // An iteration that changed once: its boundaries go on where its key comes back.
    return true;
  }
  // The iteration holds the whole run of the period: the two blocks it was found in and every
  // repeat since (its multiples would repeat inside the run too).
  dropped_period_ = period_;
  min_period_ = (repeats_ + 2) * period_;
  period_ = 0;
  repeats_ = 0;
  ++dropped_;
  prefix_ = {0};
  power_ = {1};
  return false;
}

bool PeriodDetector::detect() {
  const std::size_t n = keys_.size();  // the new key is keys_[n - 1]
  auto it = seen_.find(keys_[n - 1]);
  if (it == seen_.end()) return false;
  const std::size_t stored = std::min<std::size_t>(seen_count_[keys_[n - 1]], kCandidates);
  std::uint64_t best = 0;
  for (std::size_t c = 0; c < stored; ++c) {
    const std::uint64_t p = n - 1 - it->second[c];
    if (p < min_period_ || 2 * p > n) continue;
    if (best != 0 && p >= best) continue;
    if (block_hash(n - 2 * p, n - p) != block_hash(n - p, n)) continue;
    std::uint64_t block_max = 0;
    for (std::size_t i = n - p; i < n; ++i) block_max = std::max(block_max, live_[i]);
    if (block_max < max_live_) continue;
    best = p;
  }
  if (best == 0) return false;
  // The boundary: the lowest live count of the block, first occurrence.
  std::size_t low = n - best;
  for (std::size_t i = n - best; i < n; ++i) {
    if (live_[i] < live_[low]) low = i;
  }
  period_ = best;
  repeats_ = 0;
  boundary_key_ = keys_[low];
  since_boundary_ = n - low;
  keys_ = {};
  live_ = {};
  prefix_ = {};
  power_ = {};
  seen_ = {};
  seen_count_ = {};
  return true;
}

}  // namespace stalloc
