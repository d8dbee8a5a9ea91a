#include "src/recorder.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <unordered_map>
#include <unordered_set>

namespace stalloc {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void Recorder::push(const Event& e, vmm::DevicePtr address) {
  current_.push_back(e);
  current_addresses_.push_back(address);
  compared_ = false;
  if (timing_) current_.back().time_ns = now_ns();
}

std::uint64_t Recorder::alloc(std::uint64_t size, std::uint32_t stream, std::uint16_t thread,
                              vmm::DevicePtr address) {
  Event e;
  e.kind = EventKind::Alloc;
  e.id = next_id_++;
  e.size = size;
  e.stream = stream;
  e.iteration = iteration_;
  e.thread = thread;
  push(e, address);
  return e.id;
}

void Recorder::free(std::uint64_t id, std::uint64_t size, std::uint32_t stream,
                    std::uint16_t thread, vmm::DevicePtr address) {
  Event e;
  e.kind = EventKind::Free;
  e.id = id;
  e.size = size;
  e.stream = stream;
  e.iteration = iteration_;
  e.thread = thread;
  push(e, address);
}

namespace {

std::size_t allocations_in(const std::vector<Event>& events) {
  std::size_t n = 0;
  for (const Event& e : events) n += e.kind == EventKind::Alloc;
  return n;
}

}  // namespace

Trace Recorder::iteration_trace(VaryingSizes policy, VaryingSizes* chosen) const {
  if (policy == VaryingSizes::Auto) {
    Trace at_largest = iteration_trace(VaryingSizes::Largest);
    if (vary_together(at_largest)) {
      if (chosen != nullptr) *chosen = VaryingSizes::Largest;
      return at_largest;
    }
    policy = VaryingSizes::Dynamic;
  }
  if (chosen != nullptr) *chosen = policy;
  Trace t;
  t.meta["source"] = "stalloc-runtime";
  const OrdinalSizes* seen = nullptr;
  if (policy != VaryingSizes::Off) {
    auto it = largest_.find(allocations_in(current_));
    // What a warm-up told makes Dynamic slots only: planned at their largest from there, the
    // first plan of lengths in random order was planned again at each new longest length
    // (vary_together).
    if (it != largest_.end() && !(policy == VaryingSizes::Largest && it->second.from_warm_up)) {
      seen = &it->second;
    }
  }
  std::unordered_map<std::uint64_t, std::uint64_t> planned_size;  // id -> size planned
  std::size_t ordinal = 0;
  t.events.reserve(current_.size());
  // Tensors of earlier iterations freed in this one (last step's gradients, optimizer states
  // replaced): each stands as an allocation in the iteration before, so that the planner sees
  // when this iteration's own carried tensors will be freed in the next (slot_classifier.h).
  std::unordered_set<std::uint64_t> made_here;
  for (const Event& e : current_) {
    if (e.kind == EventKind::Alloc) made_here.insert(e.id);
  }
  for (const Event& e : current_) {
    if (e.kind != EventKind::Free || e.iteration == 0 || made_here.count(e.id) != 0) continue;
    Event made = e;
    made.kind = EventKind::Alloc;
    made.iteration = e.iteration - 1;
    made.time_ns = -1;
    t.events.push_back(made);
  }
  for (Event e : current_) {
    if (e.kind == EventKind::Alloc) {
      if (seen != nullptr) {
        if (policy == VaryingSizes::Largest && seen->varies[ordinal]) {
          e.size = std::max(e.size, seen->largest[ordinal]);
        } else if (policy == VaryingSizes::Dynamic) {
          e.dynamic = seen->varies[ordinal];
        }
      }
      ++ordinal;
      planned_size.emplace(e.id, e.size);
    } else {
      auto it = planned_size.find(e.id);
      if (it != planned_size.end()) e.size = it->second;  // else made before this iteration
    }
    t.events.push_back(e);
  }
  return t;
}

void Recorder::compare_sizes() {
  // Compared again, it would find nothing changed.
  if (std::exchange(compared_, true)) return;
  // Runs at every boundary, on the steady path too: no hashing. Allocation ids are consecutive,
  // so this iteration's tensors are those from the first one's id on, and sizes[id - first]
  // is each one's size (a free of an earlier tensor has a smaller id).
  std::vector<std::uint64_t> sizes;
  std::vector<bool> freed;
  std::uint64_t first = 0;
  std::uint64_t bytes = 0;
  std::uint64_t peak = 0;
  for (const Event& e : current_) {
    if (e.kind == EventKind::Alloc) {
      if (sizes.empty()) first = e.id;
      sizes.push_back(e.size);
      freed.push_back(false);
      bytes += e.size;
      peak = std::max(peak, bytes);
    } else if (!sizes.empty() && e.id >= first && e.id - first < sizes.size()) {
      bytes -= sizes[e.id - first];
      freed[e.id - first] = true;
    }
  }
  if (sizes.empty()) return;
  std::vector<std::uint64_t> transient;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (freed[i]) transient.push_back(sizes[i]);
  }
  const std::vector<std::uint64_t> before = std::exchange(last_transient_, std::move(transient));
  // Bounded: a run whose structure keeps changing starts over rather than growing.
  if (largest_.size() >= kLargestKept && largest_.count(sizes.size()) == 0) largest_.clear();
  const std::size_t count = sizes.size();
  const std::size_t previous = std::exchange(last_count_, count);
  if (largest_.count(count) == 0) {
    // The first iteration with this count. One with a few allocations more or fewer than the
    // last (a warm-up's lazily made optimizer state, an extra tensor) is compared with it,
    // aligned, rather than taken as the start: llama7b-varlen's iteration 1 makes one
    // allocation more than the later ones, so its iteration 2, the first of 6,685, was planned
    // with every activation fixed, and its third missed all 6,685 requests (est. 152 ms).
    auto near = largest_.find(previous);
    if (previous == 0 || near == largest_.end() ||
        std::max(count, previous) - std::min(count, previous) > kNearCounts) {
      OrdinalSizes& o = largest_.emplace(count, OrdinalSizes::first(sizes)).first->second;
      o.peak = peak;
      if (previous != 0 && before.size() > count && before.size() - count <= count / kWarmUpShare) {
        compare_with_warm_up(o, before);
      }
      return;
    }
    OrdinalSizes seeded = aligned_to(near->second, sizes);
    largest_.emplace(count, std::move(seeded));
  }
  OrdinalSizes& o = largest_.at(count);
  o.peak = std::max(o.peak, peak);
  if (o.from_warm_up && o.last != sizes) o.from_warm_up = false;
  // One iteration whose requests are shifted (an extra tensor here, one missing there) changes
  // many ordinals once, each to a neighbour's size; sizes that really vary change again and
  // again, or to a size no neighbour had (a sequence length, a routing never seen). Two changes,
  // or one to a new size, make an ordinal varying.
  o.changed = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    o.changed += sizes[i] != o.last[i] ? 1 : 0;
    if (sizes[i] != o.last[i] && o.changes[i] < 2) {
      const bool shifted = (i > 0 && sizes[i] == o.last[i - 1]) ||
                           (i + 1 < sizes.size() && sizes[i] == o.last[i + 1]);
      o.changes[i] = shifted ? static_cast<std::uint8_t>(o.changes[i] + 1) : 2;
      if (o.changes[i] == 2) o.varies[i] = true;
    }
    o.largest[i] = std::max(o.largest[i], sizes[i]);
  }
  o.last = std::move(sizes);
}

const Recorder::OrdinalSizes* Recorder::last_compared() const {
  auto it = largest_.find(last_count_);
  if (it == largest_.end() || it->second.changed == OrdinalSizes::kNotCompared) return nullptr;
  return &it->second;
}

bool Recorder::sizes_settled() const {
  const OrdinalSizes* o = last_compared();
  return o != nullptr && o->changed * kSettledShare <= o->last.size();
}

bool Recorder::sizes_changed() const {
  const OrdinalSizes* o = last_compared();
  return o != nullptr && o->changed * kSettledShare > o->last.size();
}

Recorder::OrdinalSizes Recorder::OrdinalSizes::first(const std::vector<std::uint64_t>& sizes) {
  OrdinalSizes o;
  o.largest = sizes;
  o.last = sizes;
  o.changes.assign(sizes.size(), 0);
  o.varies.assign(sizes.size(), false);
  return o;
}

std::size_t Recorder::split_point(const std::vector<std::uint64_t>& near,
                                  const std::vector<std::uint64_t>& sizes) {
  const std::size_t n = sizes.size();
  const std::size_t m = near.size();
  const std::size_t lead = n > m ? n - m : 0;
  std::vector<std::size_t> agree_from(n + 1, 0);  // shifted agreements at ordinals >= i
  for (std::size_t i = n; i-- > lead;) {
    agree_from[i] = agree_from[i + 1] + (sizes[i] == near[i + m - n] ? 1 : 0);
  }
  std::size_t split = 0;
  std::size_t best = agree_from[lead];
  std::size_t agree_before = 0;
  for (std::size_t at = 1; at <= std::min(n, m); ++at) {
    agree_before += sizes[at - 1] == near[at - 1] ? 1 : 0;
    const std::size_t score = agree_before + agree_from[at + lead];
    if (score > best) {
      best = score;
      split = at;
    }
  }
  return split;
}

void Recorder::compare_with_warm_up(OrdinalSizes& o, const std::vector<std::uint64_t>& before) {
  // Aligned around one place, as a count a few off is (the warm-up's extra tensors come before
  // its first forward pass). A size found within kWarmUpWindow ordinals of the aligned one is
  // taken for a shift, not a change: the alignment may be off by a few where the warm-up also
  // made or dropped a tensor elsewhere, and a warm-up's own sizes (weights, optimizer state)
  // must not make a fixed tensor vary.
  const std::size_t n = o.last.size();
  const std::size_t m = before.size();
  const std::size_t split = split_point(before, o.last);
  auto aligned = [&](std::size_t i) { return i < split ? i : i + m - n; };
  std::vector<std::size_t> changed;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t j = aligned(i);
    const std::size_t lo = j > kWarmUpWindow ? j - kWarmUpWindow : 0;
    const std::size_t hi = std::min(m, j + kWarmUpWindow + 1);
    if (std::find(before.begin() + lo, before.begin() + hi, o.last[i]) == before.begin() + hi) {
      changed.push_back(i);
    }
  }
  o.changed = changed.size();
  if (static_cast<double>(changed.size()) < kWarmUpChanged * static_cast<double>(n)) return;
  // The warm-up's sizes are not taken into `largest`: an ordinal a few off its own would
  // carry another tensor's size into later plans made at their largest.
  o.from_warm_up = true;
  for (std::size_t i : changed) {
    o.changes[i] = 2;
    o.varies[i] = true;
  }
}

Recorder::OrdinalSizes Recorder::aligned_to(const OrdinalSizes& near,
                                            const std::vector<std::uint64_t>& sizes) {
  // Before the split, sizes[i] stands for near's ordinal i; after it, for near's i + m - n.
  // The |n - m| ordinals of the longer one at the split stand for nothing.
  const std::size_t n = sizes.size();
  const std::size_t m = near.last.size();
  const std::size_t lead = n > m ? n - m : 0;  // first ordinal with a shifted counterpart
  auto shifted = [&](std::size_t i) { return i + m - n; };
  const std::size_t split = split_point(near.last, sizes);
  OrdinalSizes o = OrdinalSizes::first(sizes);
  for (std::size_t i = 0; i < n; ++i) {
    if (i >= split && i < split + lead) continue;
    const std::size_t j = i < split ? i : shifted(i);
    o.largest[i] = near.largest[j];
    o.last[i] = near.last[j];
    o.changes[i] = near.changes[j];
    o.varies[i] = near.varies[j];
  }
  return o;
}

bool Recorder::vary_together(const Trace& at_largest) const {
  auto it = largest_.find(allocations_in(current_));
  if (it == largest_.end()) return false;
  const OrdinalSizes& o = it->second;
  // Known from a warm-up only: planned at their largest from there, llama7b-varlen (lengths in
  // random order) was planned again at each new longest length (94.1% utilization, est. 8.1 s
  // of driver calls over 30 iterations, against 99.7% and 1.2 s as Dynamic slots).
  if (o.from_warm_up) return false;
  if (std::find(o.varies.begin(), o.varies.end(), true) == o.varies.end()) return false;
  return lower_bound_bytes(at_largest) <= o.peak + o.peak / kTogetherSlack;
}

const std::vector<bool>* Recorder::varying_ordinals(std::size_t allocations) const {
  auto it = largest_.find(allocations);
  return it == largest_.end() || it->second.from_warm_up ? nullptr : &it->second.varies;
}

void Recorder::next_iteration(bool keep) {
  compare_sizes();
  if (keep) {
    retained_.insert(retained_.end(), current_.begin(), current_.end());
    retained_addresses_.insert(retained_addresses_.end(), current_addresses_.begin(),
                               current_addresses_.end());
  }
  current_.clear();
  current_addresses_.clear();
  compared_ = false;
  ++iteration_;
}

Trace Recorder::retained_trace(int device, bool include_current) const {
  Trace t;
  t.device = device;
  t.meta["source"] = "stalloc-runtime";
  t.events = retained_;
  if (include_current) t.events.insert(t.events.end(), current_.begin(), current_.end());
  // A free whose allocation was not kept (an iteration in between was dropped) would make the
  // trace malformed: drop it, the tensor stays live to the end, as a persistent one.
  std::unordered_set<std::uint64_t> live;
  std::vector<Event> kept;
  kept.reserve(t.events.size());
  for (const Event& e : t.events) {
    if (e.kind == EventKind::Alloc) {
      live.insert(e.id);
    } else if (live.erase(e.id) == 0) {
      continue;
    }
    kept.push_back(e);
  }
  t.events = std::move(kept);
  return t;
}

std::vector<Recorder::Addressed> Recorder::all_requests() const {
  std::vector<Addressed> out;
  out.reserve(retained_.size() + current_.size());
  for (std::size_t i = 0; i < retained_.size(); ++i) out.push_back({retained_[i], retained_addresses_[i]});
  for (std::size_t i = 0; i < current_.size(); ++i) out.push_back({current_[i], current_addresses_[i]});
  return out;
}

}  // namespace stalloc
