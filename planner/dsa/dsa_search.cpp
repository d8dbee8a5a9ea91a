// Exact search for a placement under a given peak, after the ideas of MiniMalloc (Moffitt,
// ASPLOS 2023), implemented here from the paper's description:
//
// - Canonical solutions. Any placement can be pushed down until every buffer rests on one it
//   overlaps in time, or on 0. Taken in order of increasing offset, each buffer then sits on the
//   highest top of the already-placed buffers it overlaps (its "candidate" offset). So the search
//   only chooses the order, and offsets never decrease along it (ties in rank order, because
//   buffers at one offset do not overlap and any order of them gives the same state).
// - Dominance. If some unplaced buffer would fit entirely below the offset chosen next, the
//   placement is not canonical (that buffer could drop into the gap): skip it.
// - Section inference. Time is cut into sections (maximal sets of buffers live together). In
//   each, the floor (top of the highest placed buffer, at least the current offset since
//   offsets only grow, and at least the lowest candidate offset of the unplaced buffers there)
//   plus the bytes still to place there must fit the capacity.
// - Dynamic decomposition. When no unplaced buffer crosses a section boundary any more, the two
//   sides are independent problems and are solved one after the other.
// - Hatless pruning. A buffer that no unplaced buffer overlaps rests at its candidate in every
//   completion, so once the subtree below it fails, its later siblings fail too.
// - Restarts. Several static rankings (which buffer to try first at equal offsets) take turns
//   under a doubling node limit, because a good ranking solves an instance in a few hundred
//   nodes where a bad one takes millions; each round adds one ranking with seeded random
//   jitter, which solves MiniMalloc H where all three static ones fail for minutes.
#include "planner/dsa/dsa_search.h"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <functional>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>

#include "planner/dsa/dsa_conflict_index.h"
#include "planner/dsa/dsa_heuristics.h"

namespace stalloc::dsa_detail {

namespace {

using Clock = std::chrono::steady_clock;

// Beyond these the component is left to the order and window searches (see dsa_search.h). Up to
// 4,000 buffers before issue 20; measured since: the search places irregular instances of 10,000
// buffers at or within 0.15% of their lower bound in seconds.
constexpr std::size_t kMaxSearchBuffers = kExactSearchMaxBuffers;
constexpr std::uint64_t kMaxSearchPairs = kExactSearchMaxPairs;

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser, for seeded tie-breaking
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

enum class Outcome { Found, NotFound, NodeLimit, Timeout };

// A jittered ranking scales each buffer's first key by a factor drawn from [1, 1 + kJitter).
constexpr double kJitter = 0.5;
// The node limit of a jittered try, per buffer (measured on MiniMalloc H: 16n-node tries
// succeed 3% of the time at about 15 ms each, 160n-node tries 3% at ten times the cost).
constexpr std::uint64_t kShortRunNodesPerBuffer = 16;

// Static rankings: which buffer goes first among equal candidate offsets, by keys compared in
// turn, largest first. "Total" is the largest number of bytes live together anywhere in the
// buffer's lifetime: the buffers of the most crowded moments are the hardest to fit.
enum class RankKey { Total, Width, Area };
using Ranking = std::array<RankKey, 3>;
constexpr std::array<Ranking, 3> kRankings = {{{RankKey::Total, RankKey::Width, RankKey::Area},
                                               {RankKey::Width, RankKey::Area, RankKey::Total},
                                               {RankKey::Total, RankKey::Area, RankKey::Width}}};

class SectionSearch {
 public:
  SectionSearch(const std::vector<DsaBuffer>& buffers, const std::vector<std::uint32_t>& members,
                const DsaConflictIndex& index)
      : buffers_(buffers), members_(members) {
    // Who overlaps whom, by member, once: the rankings only renumber it. (Built from the
    // sections instead, it cost the sum over sections of the square of their sizes: minutes
    // on a trace whose buffers form a staircase of long lifetimes.)
    member_overlaps_.resize(members.size());
    for (std::size_t m = 0; m < members.size(); ++m) {
      // members is every buffer of buffers, in order: a buffer's index is its member index.
      index.for_each_conflict(members[m], [&](std::size_t j) {
        member_overlaps_[m].push_back(static_cast<std::uint32_t>(j));
      });
    }
    // Sections are the maximal sets of buffers live together: a stretch of time that starts
    // with an allocation and ends with a release. The stretches in between hold subsets of
    // their neighbours, so their constraints are implied and they are left out.
    std::vector<std::uint64_t> starts;
    std::vector<std::uint64_t> ends;
    for (std::uint32_t i : members) {
      starts.push_back(buffers[i].lower);
      ends.push_back(buffers[i].upper);
    }
    std::sort(starts.begin(), starts.end());
    std::sort(ends.begin(), ends.end());
    std::vector<std::uint64_t> times = starts;
    times.insert(times.end(), ends.begin(), ends.end());
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    std::vector<std::uint64_t> section_begin;  // start time of each kept section
    for (std::size_t t = 0; t + 1 < times.size(); ++t) {
      if (std::binary_search(starts.begin(), starts.end(), times[t]) &&
          std::binary_search(ends.begin(), ends.end(), times[t + 1])) {
        section_begin.push_back(times[t]);
      }
    }
    sections_ = section_begin.size();
    for (std::uint32_t i : members) {
      first_.push_back(static_cast<std::uint32_t>(
          std::lower_bound(section_begin.begin(), section_begin.end(), buffers[i].lower) -
          section_begin.begin()));
      last_.push_back(static_cast<std::uint32_t>(
          std::lower_bound(section_begin.begin(), section_begin.end(), buffers[i].upper) -
          section_begin.begin()));
    }
    // Total bytes live per section, and per member the largest total over its sections.
    std::vector<std::uint64_t> total(sections_, 0);
    for (std::size_t m = 0; m < members.size(); ++m) {
      for (std::uint32_t s = first_[m]; s < last_[m]; ++s) total[s] += buffers[members[m]].size;
    }
    for (std::size_t m = 0; m < members.size(); ++m) {
      std::uint64_t t = 0;
      for (std::uint32_t s = first_[m]; s < last_[m]; ++s) t = std::max(t, total[s]);
      section_total_.push_back(t);
    }
  }

  // A placement (buffer index, offset) with peak <= capacity, or nullopt: then refuted() says
  // whether no such placement exists (false when the time or the work ran out first). work:
  // the most nodes this call may visit (UINT64_MAX: no limit).
  std::optional<std::vector<std::pair<std::uint32_t, std::uint64_t>>> solve(
      std::uint64_t capacity, Clock::time_point deadline, std::uint64_t seed,
      std::uint64_t work = UINT64_MAX) {
    capacity_ = capacity;
    deadline_ = deadline;
    work_left_ = work;
    refuted_ = false;
    // The static rankings under a doubling node limit; then as many nodes again for short runs
    // of the rankings with keys jittered differently each time: some instances defeat all
    // three static rankings, and search times are heavy-tailed, so many short random tries
    // succeed where one long run does not (MiniMalloc H: about 3% of 16n-node tries succeed).
    const std::uint64_t short_limit = kShortRunNodesPerBuffer * members_.size();
    std::uint64_t node_limit = 2 * members_.size();
    std::uint64_t jitter_round = 0;
    while (true) {
      node_limit *= 2;
      for (const Ranking& ranking : kRankings) {
        prepare(ranking, seed, 0);
        if (const auto outcome = run(node_limit); outcome != Outcome::NodeLimit) {
          return finish(outcome);
        }
      }
      const std::uint64_t jitter_limit = std::min(node_limit, short_limit);
      const std::uint64_t tries = kRankings.size() * node_limit / jitter_limit;
      for (std::uint64_t t = 0; t < tries; ++t) {
        ++jitter_round;
        prepare(kRankings[jitter_round % kRankings.size()], seed, jitter_round);
        if (const auto outcome = run(jitter_limit); outcome != Outcome::NodeLimit) {
          return finish(outcome);
        }
      }
    }
  }

  bool refuted() const { return refuted_; }

  std::uint64_t work() const { return nodes_; }  // nodes visited, over every solve call

  // Another worker's best peak: the search stops (as on a timeout) once it is at most stop_at.
  void share(const std::atomic<std::uint64_t>* best, std::uint64_t stop_at) {
    shared_best_ = best;
    stop_at_ = stop_at;
  }

  bool cancelled() const {
    return shared_best_ != nullptr && shared_best_->load(std::memory_order_relaxed) <= stop_at_;
  }

 private:
  Outcome run(std::uint64_t node_limit) {
    nodes_left_ = node_limit;
    return solve_partition(all_items(), 0, static_cast<std::uint32_t>(sections_), 0);
  }

  std::optional<std::vector<std::pair<std::uint32_t, std::uint64_t>>> finish(Outcome outcome) {
    if (outcome == Outcome::NotFound) refuted_ = true;
    if (outcome != Outcome::Found) return std::nullopt;
    std::vector<std::pair<std::uint32_t, std::uint64_t>> result;
    for (std::size_t k = 0; k < items_.size(); ++k) {
      result.emplace_back(items_[k].buffer, solution_[k]);
    }
    return result;
  }

  struct Item {
    std::uint32_t buffer = 0;  // index into the solver's buffers
    std::uint64_t size = 0;
    std::uint64_t alignment = 1;
    std::uint32_t first = 0;  // sections [first, last) hold the lifetime
    std::uint32_t last = 0;
  };

  std::vector<std::uint32_t> all_items() const {
    std::vector<std::uint32_t> all(items_.size());
    std::iota(all.begin(), all.end(), 0u);
    return all;
  }

  // Orders the items by the ranking and resets the search state.
  void prepare(const Ranking& ranking, std::uint64_t seed, std::uint64_t jitter_round) {
    std::vector<std::size_t> order(members_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    auto value = [&](std::size_t m, RankKey key) {
      const DsaBuffer& b = buffers_[members_[m]];
      switch (key) {
        case RankKey::Total:
          return static_cast<double>(section_total_[m]);
        case RankKey::Width:
          return static_cast<double>(b.upper - b.lower);
        case RankKey::Area:
          return static_cast<double>(b.size) * static_cast<double>(b.upper - b.lower);
      }
      return 0.0;
    };
    std::vector<double> jitter(members_.size(), 1.0);
    if (jitter_round > 0) {
      for (std::size_t m = 0; m < members_.size(); ++m) {
        const std::uint64_t h = mix(seed ^ mix(jitter_round) ^ buffers_[members_[m]].id);
        jitter[m] = 1.0 + kJitter * static_cast<double>(h >> 11) * 0x1.0p-53;
      }
    }
    auto key = [&](std::size_t m) {
      return std::tuple<double, double, double>(value(m, ranking[0]) * jitter[m],
                                                value(m, ranking[1]), value(m, ranking[2]));
    };
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto ka = key(a);
      const auto kb = key(b);
      if (ka != kb) return ka > kb;
      const std::uint64_t ha = mix(seed ^ buffers_[members_[a]].id);
      const std::uint64_t hb = mix(seed ^ buffers_[members_[b]].id);
      return ha != hb ? ha < hb : a < b;
    });
    items_.clear();
    for (std::size_t m : order) {
      const DsaBuffer& b = buffers_[members_[m]];
      items_.push_back({members_[m], b.size, b.alignment, first_[m], last_[m]});
    }
    // Which items overlap in time (share a section), as adjacency lists.
    live_.assign(sections_, {});
    for (std::uint32_t k = 0; k < items_.size(); ++k) {
      for (std::uint32_t s = items_[k].first; s < items_[k].last; ++s) live_[s].push_back(k);
    }
    std::vector<std::uint32_t> item_of(members_.size());
    for (std::uint32_t k = 0; k < order.size(); ++k) item_of[order[k]] = k;
    overlaps_.assign(items_.size(), {});
    for (std::uint32_t k = 0; k < items_.size(); ++k) {
      auto& list = overlaps_[k];
      for (std::uint32_t m : member_overlaps_[order[k]]) list.push_back(item_of[m]);
      std::sort(list.begin(), list.end());
    }
    floor_.assign(sections_, 0);
    seen_.assign(sections_, 0);
    rem_.assign(sections_, 0);
    cuts_.assign(sections_, 0);
    for (const Item& item : items_) {
      for (std::uint32_t s = item.first; s < item.last; ++s) rem_[s] += item.size;
      for (std::uint32_t s = item.first; s + 1 < item.last; ++s) ++cuts_[s];
    }
    placed_.assign(items_.size(), 0);
    candidate_.assign(items_.size(), 0);
    solution_.assign(items_.size(), 0);
  }

  Outcome solve_partition(const std::vector<std::uint32_t>& members, std::uint32_t lo,
                          std::uint32_t hi, std::size_t depth) {
    for (std::uint32_t s = lo; s < hi; ++s) {
      if (floor_[s] + rem_[s] > capacity_) return Outcome::NotFound;
    }
    return descend(members, lo, hi, 0, 0, false, depth);
  }

  Outcome descend(const std::vector<std::uint32_t>& members, std::uint32_t lo, std::uint32_t hi,
                  std::uint64_t last_offset, std::uint32_t last_item, bool any_placed,
                  std::size_t depth) {
    // The work budget ends the search as the deadline does; a restart's node limit only
    // ends the restart.
    if (work_left_ == 0) return Outcome::Timeout;
    if (nodes_left_ == 0) return Outcome::NodeLimit;
    --nodes_left_;
    --work_left_;
    // A node costs O(members) already: the clock every 8 nodes is free, and large instances
    // (thousands of buffers, long lifetimes) no longer run far past the deadline.
    if ((++nodes_ & 7) == 0 && (Clock::now() > deadline_ || cancelled())) {
      return Outcome::Timeout;
    }

    std::uint64_t lowest_top = UINT64_MAX;
    bool any_left = false;
    for (std::uint32_t k : members) {
      if (placed_[k] != 0) continue;
      const std::uint64_t top = candidate_[k] + items_[k].size;
      if (top > capacity_) return Outcome::NotFound;  // it only rises from here
      lowest_top = std::min(lowest_top, top);
      any_left = true;
    }
    if (!any_left) return Outcome::Found;
    if (lowest_top <= last_offset) return Outcome::NotFound;  // a buffer was left in a gap

    std::uint32_t fullest = lo;  // the section with the most bytes left to place
    for (std::uint32_t s = lo; s < hi; ++s) {
      if (rem_[s] > rem_[fullest]) fullest = s;
    }
    const std::uint64_t most_left = rem_[fullest];
    if (children_.size() <= depth) children_.resize(depth + 1);
    auto& children = children_[depth];
    children.clear();
    for (std::uint32_t k : members) {
      if (placed_[k] != 0) continue;
      const std::uint64_t x = candidate_[k];
      if (x < last_offset || (any_placed && x == last_offset && k < last_item)) continue;
      if (x >= lowest_top) continue;  // dominated: some buffer fits entirely below x
      // From x on, the fullest section must still fit, unless k is the last buffer it holds.
      if (x + most_left > capacity_ &&
          (most_left != items_[k].size || fullest < items_[k].first || fullest >= items_[k].last)) {
        continue;
      }
      children.emplace_back(x, k);
    }
    std::sort(children.begin(), children.end());
    // Deeper levels may grow children_, so index it afresh instead of keeping the reference.
    for (std::size_t c = 0; c < children_[depth].size(); ++c) {
      const auto [x, k] = children_[depth][c];
      bool hatless = true;
      const Outcome outcome =
          place_and_continue(members, lo, hi, x, k, most_left, depth, hatless);
      if (outcome != Outcome::NotFound) return outcome;
      // Nothing unplaced overlaps k: it rests at x in every completion, and every later sibling
      // (higher in the canonical order) would have to follow it, so they all fail as well.
      if (hatless) break;
    }
    return Outcome::NotFound;
  }

  // most_left: the largest rem_ over the partition before the placement. hatless is cleared
  // when some unplaced buffer overlaps k.
  Outcome place_and_continue(const std::vector<std::uint32_t>& members, std::uint32_t lo,
                             std::uint32_t hi, std::uint64_t x, std::uint32_t k,
                             std::uint64_t most_left, std::size_t depth, bool& hatless) {
    const Item& item = items_[k];
    const std::uint64_t top = x + item.size;
    const std::size_t floor_mark = saved_floors_.size();
    const std::size_t candidate_mark = saved_candidates_.size();
    for (std::uint32_t s = item.first; s < item.last; ++s) {
      saved_floors_.push_back(floor_[s]);
      floor_[s] = top;
      rem_[s] -= item.size;
    }
    for (std::uint32_t j : overlaps_[k]) {
      if (placed_[j] != 0) continue;
      hatless = false;
      const std::uint64_t raised = align_up(top, items_[j].alignment);
      if (candidate_[j] >= raised) continue;
      saved_candidates_.emplace_back(j, candidate_[j]);
      candidate_[j] = raised;
    }
    placed_[k] = 1;
    solution_[k] = x;

    Outcome outcome = Outcome::NotFound;
    if (fits_after(k, x, lo, hi, most_left, candidate_mark)) {
      std::vector<std::uint32_t> cuts;
      for (std::uint32_t s = item.first; s + 1 < item.last; ++s) {
        if (--cuts_[s] == 0 && s + 1 > lo && s + 1 < hi) cuts.push_back(s + 1);
      }
      if (cuts.empty()) {
        outcome = descend(members, lo, hi, x, k, true, depth + 1);
      } else {
        outcome = solve_pieces(members, lo, hi, cuts, depth + 1);
      }
      for (std::uint32_t s = item.first; s + 1 < item.last; ++s) ++cuts_[s];
    }

    placed_[k] = 0;
    for (std::size_t c = saved_candidates_.size(); c > candidate_mark; --c) {
      candidate_[saved_candidates_[c - 1].first] = saved_candidates_[c - 1].second;
    }
    saved_candidates_.resize(candidate_mark);
    for (std::uint32_t s = item.first; s < item.last; ++s) {
      floor_[s] = saved_floors_[floor_mark + (s - item.first)];
      rem_[s] += item.size;
    }
    saved_floors_.resize(floor_mark);
    return outcome;
  }

  // Section inference after placing item k at x. Sections outside k's span whose candidates did
  // not move passed the same test at the parent, except for the rise of the current offset,
  // which is checked against the largest remaining total.
  bool fits_after(std::uint32_t k, std::uint64_t x, std::uint32_t lo, std::uint32_t hi,
                  std::uint64_t most_left, std::size_t raised_from) {
    if (x + most_left > capacity_) {
      // rem_ no longer counts k: a section it emptied has nothing left to place.
      for (std::uint32_t s = lo; s < hi; ++s) {
        if (rem_[s] != 0 && x + rem_[s] > capacity_) return false;
      }
    }
    ++stamp_;
    auto check = [&](std::uint32_t s) {
      if (seen_[s] == stamp_) return true;
      seen_[s] = stamp_;
      if (rem_[s] == 0) return true;
      // Every buffer still to place here goes at or above its own candidate offset.
      std::uint64_t bottom = UINT64_MAX;
      for (std::uint32_t j : live_[s]) {
        if (placed_[j] == 0) bottom = std::min(bottom, candidate_[j]);
      }
      return std::max(floor_[s], bottom) + rem_[s] <= capacity_;
    };
    for (std::uint32_t s = items_[k].first; s < items_[k].last; ++s) {
      if (!check(s)) return false;
    }
    for (std::size_t c = raised_from; c < saved_candidates_.size(); ++c) {
      const Item& raised = items_[saved_candidates_[c].first];
      for (std::uint32_t s = raised.first; s < raised.last; ++s) {
        if (!check(s)) return false;
      }
    }
    return true;
  }

  // The unplaced members fall apart at the cuts: each piece is its own problem, with offsets
  // starting again from the bottom.
  Outcome solve_pieces(const std::vector<std::uint32_t>& members, std::uint32_t lo,
                       std::uint32_t hi, std::vector<std::uint32_t> cuts, std::size_t depth) {
    cuts.insert(cuts.begin(), lo);
    cuts.push_back(hi);
    for (std::size_t p = 0; p + 1 < cuts.size(); ++p) {
      std::vector<std::uint32_t> piece;
      for (std::uint32_t k : members) {
        if (placed_[k] == 0 && items_[k].first < cuts[p + 1] && cuts[p] < items_[k].last) {
          piece.push_back(k);
        }
      }
      if (piece.empty()) continue;
      const Outcome outcome = solve_partition(piece, cuts[p], cuts[p + 1], depth);
      if (outcome != Outcome::Found) return outcome;
    }
    return Outcome::Found;
  }

  const std::vector<DsaBuffer>& buffers_;
  const std::vector<std::uint32_t> members_;
  std::vector<std::vector<std::uint32_t>> member_overlaps_;  // by member index
  std::vector<std::uint32_t> first_;  // per member: its sections
  std::vector<std::uint32_t> last_;
  std::vector<std::uint64_t> section_total_;  // per member: largest live total over its sections
  std::size_t sections_ = 0;

  std::vector<Item> items_;  // in rank order: the tie-break among equal offsets
  std::vector<std::vector<std::uint32_t>> overlaps_;
  std::vector<std::vector<std::uint32_t>> live_;  // items live in each section
  std::uint64_t capacity_ = 0;
  Clock::time_point deadline_;
  const std::atomic<std::uint64_t>* shared_best_ = nullptr;
  std::uint64_t stop_at_ = 0;
  bool refuted_ = false;
  std::uint64_t nodes_ = 0;
  std::uint64_t nodes_left_ = 0;
  std::uint64_t work_left_ = UINT64_MAX;
  std::vector<std::uint64_t> floor_;  // top of the highest placed buffer, per section
  std::vector<std::uint64_t> rem_;    // bytes of unplaced buffers, per section
  std::vector<std::uint32_t> cuts_;   // unplaced buffers crossing from section s to s + 1
  std::vector<char> placed_;
  std::vector<std::uint64_t> candidate_;  // lowest offset each unplaced item could rest at
  std::vector<std::uint64_t> solution_;   // offset of each item on the current path
  std::vector<std::vector<std::pair<std::uint64_t, std::uint32_t>>> children_;  // per depth
  std::vector<std::uint32_t> seen_;  // sections visited in this check, by stamp
  std::uint32_t stamp_ = 0;
  std::vector<std::uint64_t> saved_floors_;  // undo logs for backtracking
  std::vector<std::pair<std::uint32_t, std::uint64_t>> saved_candidates_;
};

// The search recurses a few frames per placed buffer, up to kMaxSearchBuffers deep: more than a
// default 8 MiB stack holds in sanitizer builds. So it runs on a thread with a stack of its own
// (reserved, not committed, until used).
constexpr std::size_t kSearchStackBytes = std::size_t{512} << 20;

template <typename Work>
void run_on_large_stack(Work& work) {
  struct Call {
    Work* work;
    std::exception_ptr error;
  } call{&work, nullptr};
  auto entry = [](void* arg) -> void* {
    Call* c = static_cast<Call*>(arg);
    try {
      (*c->work)();
    } catch (...) {
      c->error = std::current_exception();
    }
    return nullptr;
  };
  pthread_attr_t attributes;
  pthread_t thread;
  bool started = false;
  if (pthread_attr_init(&attributes) == 0) {
    started = pthread_attr_setstacksize(&attributes, kSearchStackBytes) == 0 &&
              pthread_create(&thread, &attributes, entry, &call) == 0;
    pthread_attr_destroy(&attributes);
  }
  if (started) {
    pthread_join(thread, nullptr);
  } else {
    entry(&call);  // no thread to be had: the caller's stack must do
  }
  if (call.error) std::rethrow_exception(call.error);
}

SearchResult search_one(const SearchRequest& request) {
  const std::vector<DsaBuffer>& buffers = *request.buffers;
  SearchResult result;
  result.offsets = *request.incumbent;
  result.peak = placement_peak(buffers, result.offsets);
  if (result.peak <= request.target) {
    result.reached_target = true;
    return result;
  }
  const auto start = Clock::now();
  if (start >= request.deadline) return result;
  const DsaConflictIndex index(buffers);
  std::uint64_t pairs = 0;
  for (std::size_t i = 0; i < buffers.size(); ++i) pairs += index.degree(i);
  if (buffers.size() > kMaxSearchBuffers || pairs > kMaxSearchPairs) return result;
  result.searched = true;
  std::vector<std::uint32_t> members(buffers.size());
  std::iota(members.begin(), members.end(), 0u);
  SectionSearch search(buffers, members, index);
  search.share(request.shared_best, request.target);
  auto apply = [&](const std::vector<std::pair<std::uint32_t, std::uint64_t>>& placed) {
    std::uint64_t peak = 0;
    for (const auto& [i, offset] : placed) {
      result.offsets[i] = offset;
      peak = std::max(peak, offset + buffers[i].size);
    }
    result.peak = peak;
    if (request.shared_best != nullptr) {
      std::uint64_t seen = request.shared_best->load(std::memory_order_relaxed);
      while (peak < seen &&
             !request.shared_best->compare_exchange_weak(seen, peak, std::memory_order_relaxed)) {
      }
    }
    return peak;
  };
  // First the target itself (70% of the time and of the work), then bisection between it and
  // the best peak with what is left.
  const bool no_deadline = request.deadline == Clock::time_point::max();
  const auto target_deadline =
      no_deadline ? request.deadline : start + (request.deadline - start) * 7 / 10;
  const std::uint64_t limit = request.work_limit;
  const std::uint64_t target_work =
      limit == 0 ? UINT64_MAX : std::max<std::uint64_t>(1, limit / 10 * 7 + limit % 10 * 7 / 10);
  auto work_left = [&] { return limit == 0 ? UINT64_MAX : limit - std::min(limit, search.work()); };
  auto finish = [&] {
    result.work = search.work();
    return result;
  };
  if (auto found = search.solve(request.target, target_deadline, request.seed, target_work)) {
    apply(*found);
    result.reached_target = true;
    return finish();
  }
  std::uint64_t lo = request.target + 1;
  if (search.refuted()) result.refuted_below = lo;
  std::uint64_t hi = result.peak - 1;
  while (lo <= hi && work_left() > 0 && Clock::now() < request.deadline && !search.cancelled()) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (auto found = search.solve(mid, request.deadline, request.seed, work_left())) {
      hi = apply(*found) - 1;
    } else if (search.refuted()) {
      lo = mid + 1;
      result.refuted_below = lo;
    } else {
      break;
    }
  }
  result.proved_optimal = lo > hi;
  return finish();
}

}  // namespace

SearchResult search_below(const SearchRequest& request) {
  SearchResult result;
  auto work = [&] { result = search_one(request); };
  run_on_large_stack(work);
  return result;
}

}  // namespace stalloc::dsa_detail
