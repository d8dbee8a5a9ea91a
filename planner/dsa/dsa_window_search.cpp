// Large-neighbourhood search over time windows, for components of any size (the exact search in
// dsa_search.cpp stops being practical at a few thousand buffers). The peak of a placement is
// made at a few places in time; only the buffers there need to move, and the rest of the
// placement is a fixed frame for them. So, one level at a time:
//
// - A level L below the best peak is chosen. The excess of a buffer is how far its top reaches
//   above L; the placement is at L when no buffer has any. (Weighting it by the lifetime or the
//   size, or counting buffers instead, was tried: no better on the irregular instances.)
// - A window: a buffer with excess is drawn, and a span of time around its lifetime, extended
//   on each side by a random amount whose binary scale is drawn as u^3 of the horizon's, u
//   uniform: most windows are short (cheap, many tries), a few cover everything. The
//   buffers whose lifetimes lie inside the span are lifted out; every other buffer live in the
//   span stays where it is.
// - They are put back by greedy placement among the fixed ones (OccupancyTree, so a window costs
//   about its size times log^2), in an order drawn afresh each time: a random mix of size,
//   lifetime and number of conflicts with noise, those that had excess first half of the time;
//   or, one time in eight, by their current offset, lowest first, at the lowest offset (which
//   never raises a buffer: a compaction).
// - The new placement of the window is kept when its excess is not larger (ties are kept, so
//   the search drifts across plateaus). Excess zero everywhere: the level is reached, the best
//   placement is replaced and the next level is twice as far below (the step doubles); no
//   progress for a while: back to the best placement with a level half as far (the step halves).
//
// The best placement only ever gets lower, so the search can stop at any time.
#include "planner/dsa/dsa_window_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "planner/dsa/dsa_heuristics.h"
#include "planner/dsa/dsa_occupancy.h"

namespace stalloc::dsa_detail {

namespace {

using Clock = std::chrono::steady_clock;
__extension__ typedef unsigned __int128 Wide;  // excess in bytes, summed over buffers

class WindowSearch {
 public:
  explicit WindowSearch(const WindowSearchRequest& request)
      : request_(request), buffers_(*request.buffers), index_(*request.index), rng_(request.seed) {
    const std::size_t n = buffers_.size();
    log_size_.resize(n);
    log_length_.resize(n);
    log_degree_.resize(n);
    first_ = UINT64_MAX;
    last_ = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const DsaBuffer& b = buffers_[i];
      log_size_[i] = std::log(static_cast<double>(b.size));
      log_length_[i] = std::log(static_cast<double>(b.upper - b.lower));
      log_degree_[i] = std::log(1.0 + static_cast<double>(index_.degree(i)));
      first_ = std::min(first_, b.lower);
      last_ = std::max(last_, b.upper);
    }
    slot_.assign(n, kNone);
  }

  WindowSearchResult run() {
    WindowSearchResult& result = result_;
    offsets_ = *request_.incumbent;
    result.offsets = offsets_;
    result.peak = placement_peak(buffers_, offsets_);
    DsaProblem problem;
    problem.buffers = buffers_;
    const std::uint64_t target = std::max(request_.target, dsa_lower_bound(problem));
    if (result.peak <= target) return std::move(result_);
    std::uint64_t step = std::max<std::uint64_t>(1, (result.peak - target) / 2);
    set_level(std::max(target, result.peak - step));
    Wide best_excess = total_;
    std::uint64_t since_better = 0;
    while (!stopped(target)) {
      if (above_.empty()) {
        result.offsets = offsets_;
        result.peak = placement_peak(buffers_, offsets_);
        ++result.improvements;
        publish(result.peak);
        if (result.peak <= target) break;
        step = std::clamp<std::uint64_t>(2 * step, 1, result.peak - target);
        set_level(std::max(target, result.peak - step));
        best_excess = total_;
        since_better = 0;
        continue;
      }
      if (!choose_window()) break;  // the next window would pass the work limit
      ++result.windows;
      if (recreate()) ++result.accepted;
      result.lifted += lifted_.size();
      result.fixed += fixed_.size();
      if (total_ < best_excess) {
        best_excess = total_;
        since_better = 0;
      } else if (++since_better > patience()) {
        // Stuck at this level: back to the best placement, half as far below it.
        offsets_ = result.offsets;
        step = std::max<std::uint64_t>(1, step / 2);
        set_level(std::max(target, result.peak - step));
        best_excess = total_;
        since_better = 0;
      }
    }
    return std::move(result_);
  }

 private:
  static constexpr std::size_t kNone = SIZE_MAX;

  bool stopped(std::uint64_t target) {
    if (request_.shared_best != nullptr &&
        request_.shared_best->load(std::memory_order_relaxed) <= target) {
      return true;
    }
    return Clock::now() >= request_.deadline;
  }

  void publish(std::uint64_t peak) {
    if (request_.shared_best == nullptr) return;
    std::uint64_t seen = request_.shared_best->load(std::memory_order_relaxed);
    while (peak < seen &&
           !request_.shared_best->compare_exchange_weak(seen, peak, std::memory_order_relaxed)) {
    }
  }

  std::uint64_t patience() const { return 64 + 4 * static_cast<std::uint64_t>(above_.size()); }

  Wide excess(std::size_t i, std::uint64_t offset) const {
    const DsaBuffer& b = buffers_[i];
    const std::uint64_t top = offset + b.size;
    if (top <= level_) return 0;
    return top - level_;
  }

  void set_level(std::uint64_t level) {
    level_ = level;
    total_ = 0;
    for (std::size_t i : above_) slot_[i] = kNone;
    above_.clear();
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      const Wide e = excess(i, offsets_[i]);
      total_ += e;
      if (e > 0) mark_above(i, true);
    }
  }

  void mark_above(std::size_t i, bool above) {
    if (above && slot_[i] == kNone) {
      slot_[i] = above_.size();
      above_.push_back(i);
    } else if (!above && slot_[i] != kNone) {
      const std::size_t at = slot_[i];
      above_[at] = above_.back();
      slot_[above_[at]] = at;
      above_.pop_back();
      slot_[i] = kNone;
    }
  }

  double unit() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

  // A random extension of the window: 0 to the whole horizon, log-uniform in scale.
  std::uint64_t extension() {
    const std::uint64_t horizon = last_ - first_;
    const int bits = 64 - __builtin_clzll(horizon | 1);
    const double u = unit();
    const int scale = static_cast<int>(static_cast<double>(bits + 1) * u * u * u);
    return scale == 0 ? 0 : rng_() % (std::uint64_t{1} << scale);
  }

  // Draws the next window into lifted_ and fixed_; false, and nothing to re-place, when it
  // would take the work past the limit.
  bool choose_window() {
    const std::size_t c = above_[rng_() % above_.size()];
    const DsaBuffer& centre = buffers_[c];
    const std::uint64_t from = std::max(first_, centre.lower - std::min(centre.lower, extension()));
    const std::uint64_t to = std::min(last_, centre.upper + extension());
    lifted_.clear();
    fixed_.clear();
    index_.for_each_overlapping(from, to, [&](std::size_t j) {
      const DsaBuffer& b = buffers_[j];
      if (b.lower >= from && b.upper <= to) {
        lifted_.push_back(static_cast<std::uint32_t>(j));
      } else {
        fixed_.push_back(static_cast<std::uint32_t>(j));
      }
    });
    const std::uint64_t cost = lifted_.size() + fixed_.size();
    if (request_.work_limit != 0 && request_.work_limit - result_.work < cost) return false;
    result_.work += cost;
    return true;
  }

  // Puts the lifted buffers back among the fixed ones (and the pinned one at its new place);
  // keeps the result unless the excess grew.
  bool recreate() {
    local_.clear();
    for (std::uint32_t j : lifted_) local_.push_back(buffers_[j]);
    for (std::uint32_t j : fixed_) local_.push_back(buffers_[j]);
    tree_.reset(local_);
    const std::size_t lifted = lifted_.size();
    for (std::size_t k = 0; k < fixed_.size(); ++k) tree_.insert(lifted + k, offsets_[fixed_[k]]);

    // The order of the lifted buffers.
    order_.resize(lifted);
    std::iota(order_.begin(), order_.end(), 0u);
    keys_.resize(lifted);
    Placement placement = Placement::BestFit;
    if (rng_() % 8 == 0) {
      for (std::size_t k = 0; k < lifted; ++k) keys_[k] = -static_cast<double>(offsets_[lifted_[k]]);
      placement = Placement::LowestOffset;
    } else {
      const double a = unit();
      const double b = unit();
      const double d = unit();
      const double noise = 0.5 * unit();
      const double squeak = rng_() % 2 == 0 ? 0.0 : 100.0;
      for (std::size_t k = 0; k < lifted; ++k) {
        const std::uint32_t j = lifted_[k];
        keys_[k] = a * log_size_[j] + b * log_length_[j] + d * log_degree_[j] + noise * unit() +
                   (slot_[j] != kNone ? squeak : 0.0);
      }
      if (rng_() % 2 == 0) placement = Placement::LowestOffset;
    }
    std::sort(order_.begin(), order_.end(), [&](std::uint32_t x, std::uint32_t y) {
      return keys_[x] > keys_[y] || (keys_[x] == keys_[y] && x < y);
    });
    placed_.resize(lifted);
    std::size_t count = 0;
    for (std::uint32_t k : order_) {
      // A window of tens of thousands of buffers takes a while: give up on it at the deadline.
      if ((++count & 1023) == 0 && Clock::now() >= request_.deadline) return false;
      placed_[k] = choose_offset(tree_, k, local_[k], placement);
      tree_.insert(k, placed_[k]);
    }
    Wide before = 0;
    Wide after = 0;
    for (std::size_t k = 0; k < lifted; ++k) {
      before += excess(lifted_[k], offsets_[lifted_[k]]);
      after += excess(lifted_[k], placed_[k]);
    }
    if (after > before) return false;
    for (std::size_t k = 0; k < lifted; ++k) {
      const std::uint32_t j = lifted_[k];
      offsets_[j] = placed_[k];
      mark_above(j, excess(j, placed_[k]) > 0);
    }
    total_ = total_ - before + after;
    return true;
  }

  const WindowSearchRequest& request_;
  WindowSearchResult result_;
  const std::vector<DsaBuffer>& buffers_;
  const DsaConflictIndex& index_;
  std::mt19937_64 rng_;
  std::vector<double> log_size_;
  std::vector<double> log_length_;
  std::vector<double> log_degree_;
  std::uint64_t first_ = 0;  // the span of all lifetimes
  std::uint64_t last_ = 0;

  std::vector<std::uint64_t> offsets_;  // the current placement
  std::uint64_t level_ = 0;
  Wide total_ = 0;                  // the sum of all excesses at level_
  std::vector<std::size_t> above_;  // buffers with excess, in any order
  std::vector<std::size_t> slot_;   // position in above_, or kNone

  // Scratch for one window.
  std::vector<std::uint32_t> lifted_;
  std::vector<std::uint32_t> fixed_;
  std::vector<DsaBuffer> local_;
  std::vector<std::uint32_t> order_;
  std::vector<double> keys_;
  std::vector<std::uint64_t> placed_;
  OccupancyTree tree_{local_};
};

}  // namespace

WindowSearchResult improve_by_windows(const WindowSearchRequest& request) {
  WindowSearch search(request);
  return search.run();
}

}  // namespace stalloc::dsa_detail
