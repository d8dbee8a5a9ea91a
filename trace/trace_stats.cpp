#include "trace/trace_stats.h"

#include <bit>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace stalloc {

namespace {

using Signature = std::vector<std::pair<std::uint64_t, std::uint32_t>>;  // (size, stream) per allocation

struct AllocInfo {
  std::uint64_t size;
  std::uint32_t iteration;
  std::uint64_t ordinal;  // index among its iteration's allocations
  bool dynamic_hint;
  bool freed = false;
};

std::uint64_t bucket_of(std::uint64_t size) {
  return size == 0 ? 0 : std::bit_floor(size);
}

}  // namespace

TraceStats compute_trace_stats(const Trace& trace, const TraceStatsOptions& options) {
  TraceStats s;
  s.events = trace.events.size();
  s.small_threshold = options.small_threshold;
  s.problem = validate_trace(trace);

  std::vector<AllocInfo> allocs;
  std::unordered_map<std::uint64_t, std::size_t> live;  // id -> index in allocs
  std::map<std::uint32_t, Signature> signatures;
  std::unordered_set<std::uint64_t> sizes;
  std::unordered_set<std::uint32_t> streams;
  std::map<std::uint64_t, SizeBucket> buckets;
  std::uint64_t current = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    streams.insert(e.stream);
    if (e.kind == EventKind::Free) {
      ++s.frees;
      auto it = live.find(e.id);
      if (it == live.end()) continue;
      allocs[it->second].freed = true;
      current -= allocs[it->second].size;
      live.erase(it);
      continue;
    }
    ++s.allocations;
    Signature& sig = signatures[e.iteration];
    allocs.push_back({e.size, e.iteration, sig.size(), e.dynamic});
    sig.emplace_back(e.size, e.stream);
    // An id allocated again while live replaces the earlier one, as lower_bound_bytes does.
    auto [it, inserted] = live.emplace(e.id, allocs.size() - 1);
    if (!inserted) it->second = allocs.size() - 1;
    current += e.size;
    if (current > s.lower_bound_bytes) {
      s.lower_bound_bytes = current;
      s.lower_bound_event = i;
      s.lower_bound_iteration = e.iteration;
    }
    sizes.insert(e.size);
    SizeBucket& b = buckets[bucket_of(e.size)];
    b.min_bytes = bucket_of(e.size);
    ++b.count;
    b.bytes += e.size;
  }
  s.iterations = signatures.size();
  s.streams = streams.size();
  s.distinct_sizes = sizes.size();
  for (const auto& [min, b] : buckets) s.size_histogram.push_back(b);

  std::set<Signature> distinct;
  for (const auto& [iter, sig] : signatures) distinct.insert(sig);
  s.iteration_signatures = distinct.size();
  if (signatures.size() >= 3) {
    const Signature& steady = std::next(signatures.begin())->second;
    s.periodic = true;
    for (auto it = std::next(signatures.begin()); it != signatures.end(); ++it) s.periodic &= it->second == steady;
  }

  // Ordinals whose size is not the same in every compared iteration.
  bool skip_first = signatures.size() >= 3;
  std::uint32_t first_iteration = signatures.empty() ? 0 : signatures.begin()->first;
  std::vector<std::uint64_t> size_at;
  std::vector<bool> varies;
  for (auto it = signatures.begin(); it != signatures.end(); ++it) {
    if (skip_first && it == signatures.begin()) continue;
    for (std::size_t k = 0; k < it->second.size(); ++k) {
      if (k == size_at.size()) {
        size_at.push_back(it->second[k].first);
        varies.push_back(false);
      } else if (size_at[k] != it->second[k].first) {
        varies[k] = true;
      }
    }
  }
  for (const AllocInfo& a : allocs) {
    s.total_bytes += a.size;
    bool compared = !(skip_first && a.iteration == first_iteration);
    if (!a.freed) {
      ++s.persistent;
      s.persistent_bytes += a.size;
    } else if (a.size < options.small_threshold) {
      s.small_bytes += a.size;
    } else if (a.dynamic_hint || (compared && varies[a.ordinal])) {
      s.dynamic_bytes += a.size;
    } else {
      s.static_bytes += a.size;
    }
  }
  return s;
}

}  // namespace stalloc
