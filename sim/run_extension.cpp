#include "sim/run_extension.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace stalloc {
namespace {

std::uint32_t iterations_of(const Trace& trace) {
  if (trace.events.empty()) return 0;
  return trace.events.back().iteration - trace.events.front().iteration + 1;
}

std::size_t seeded_blocks(const Trace& trace) {
  auto it = trace.meta.find("seeded_live_blocks");
  if (it == trace.meta.end()) return 0;
  const unsigned long long n = std::strtoull(it->second.c_str(), nullptr, 10);
  return std::min<std::size_t>(n, trace.events.size());
}

}  // namespace

std::uint32_t default_repetitions(const Trace& trace) {
  const std::uint32_t recorded = iterations_of(trace);
  if (recorded == 0) return 0;
  return std::max(kSteadyExtra, kSteadyIterations > recorded ? kSteadyIterations - recorded : 0u);
}

Trace with_repeated_last_iteration(const Trace& trace, std::uint32_t copies) {
  Trace out = trace;
  if (copies == 0 || trace.events.empty()) return out;
  const std::uint32_t last = trace.events.back().iteration;
  const std::size_t seeded = seeded_blocks(trace);
  std::size_t begin = trace.events.size();
  while (begin > 0 && trace.events[begin - 1].iteration == last) --begin;
  begin = std::max(begin, seeded);

  // What L makes, and which of those it frees.
  std::unordered_set<std::uint64_t> made, freed;
  for (std::size_t i = begin; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.kind == EventKind::Alloc) {
      made.insert(e.id);
    } else if (made.count(e.id) != 0) {
      freed.insert(e.id);
    }
  }
  // Carried out (made, not freed) and carried in (freed, not made), paired by size in order.
  std::map<std::uint64_t, std::vector<std::uint64_t>> out_by_size;  // size -> ids carried out
  std::vector<std::pair<std::size_t, std::uint64_t>> carried_in;     // event index, size
  for (std::size_t i = begin; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.kind == EventKind::Alloc && freed.count(e.id) == 0) out_by_size[e.size].push_back(e.id);
    if (e.kind == EventKind::Free && made.count(e.id) == 0) carried_in.emplace_back(i, e.size);
  }
  std::unordered_map<std::size_t, std::uint64_t> partner_of_free;  // event index -> carried-out id
  std::unordered_set<std::uint64_t> partnered;                     // carried-out ids with a partner
  std::map<std::uint64_t, std::size_t> taken;                      // size -> partners used
  for (const auto& [index, size] : carried_in) {
    auto it = out_by_size.find(size);
    if (it == out_by_size.end()) continue;
    std::size_t& used = taken[size];
    if (used == it->second.size()) continue;
    partner_of_free[index] = it->second[used];
    partnered.insert(it->second[used]);
    ++used;
  }

  std::uint64_t next_id = 0;
  for (const Event& e : trace.events) next_id = std::max(next_id, e.id);
  // The instance of each carried-out block in the copy before (the recorded ids at first).
  std::unordered_map<std::uint64_t, std::uint64_t> previous;
  std::vector<const Event*> unpartnered;  // carried out with no free to pair with, in order
  for (std::size_t i = begin; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.kind != EventKind::Alloc || freed.count(e.id) != 0) continue;
    previous[e.id] = e.id;
    if (partnered.count(e.id) == 0) unpartnered.push_back(&e);
  }
  out.events.reserve(trace.events.size() + copies * (trace.events.size() - begin + unpartnered.size()));
  for (std::uint32_t copy = 1; copy <= copies; ++copy) {
    std::unordered_map<std::uint64_t, std::uint64_t> fresh;  // recorded id -> this copy's id
    std::unordered_map<std::uint64_t, std::uint64_t> current;
    // What the step before kept with nothing to free it goes as this step starts, before the
    // step makes its own again where it did: each copy holds what the recorded step held.
    for (const Event* kept : unpartnered) {
      Event e = *kept;
      e.kind = EventKind::Free;
      e.id = previous.at(kept->id);
      e.iteration = last + copy;
      e.time_ns = -1;
      out.events.push_back(e);
    }
    for (std::size_t i = begin; i < trace.events.size(); ++i) {
      Event e = trace.events[i];
      e.iteration = last + copy;
      e.time_ns = -1;
      if (e.kind == EventKind::Alloc) {
        const bool paired = freed.count(e.id) != 0;
        const std::uint64_t id = ++next_id;
        (paired ? fresh : current)[e.id] = id;
        e.id = id;
      } else if (made.count(e.id) != 0) {
        e.id = fresh.at(e.id);
      } else {
        auto partner = partner_of_free.find(i);
        if (partner == partner_of_free.end()) continue;  // only the recorded step held it
        e.id = previous.at(partner->second);
      }
      out.events.push_back(e);
    }
    for (const auto& [recorded, id] : current) previous[recorded] = id;
  }
  return out;
}

}  // namespace stalloc
