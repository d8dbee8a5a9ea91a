#include "trace/iteration_finder.h"

#include <algorithm>
#include <map>

namespace stalloc {

namespace {

struct Key {
  std::uint64_t size;
  std::uint32_t stream;
  std::uint64_t live;
  friend bool operator==(const Key&, const Key&) = default;
};

// z[i] = the length of the longest common prefix of s and s[i..]; z[0] = s.size().
std::vector<std::size_t> z_function(const std::vector<Key>& s) {
  const std::size_t n = s.size();
  std::vector<std::size_t> z(n, 0);
  if (n == 0) return z;
  z[0] = n;
  std::size_t left = 0, right = 0;  // the rightmost match window [left, right)
  for (std::size_t i = 1; i < n; ++i) {
    if (i < right) z[i] = std::min(right - i, z[i - left]);
    while (i + z[i] < n && s[z[i]] == s[i + z[i]]) ++z[i];
    if (i + z[i] > right) {
      left = i;
      right = i + z[i];
    }
  }
  return z;
}

}  // namespace

IterationSplit find_iterations(const Trace& trace, std::size_t first) {
  std::vector<Key> keys;        // the allocations from `first` on
  std::vector<std::size_t> at;  // their event indices
  std::uint64_t live = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.kind == EventKind::Free) {
      if (live > 0) --live;
      continue;
    }
    if (i >= first) {
      keys.push_back(Key{e.size, e.stream, live});
      at.push_back(i);
    }
    ++live;
  }
  IterationSplit split;
  const std::size_t n = keys.size();
  if (n < 4) return split;
  // The last allocation at the highest live count: the repeating suffix must reach it.
  std::size_t last_peak = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (keys[i].live >= keys[last_peak].live) last_peak = i;
  }
  // Reversed, the periodic suffix of period p is the common prefix of the sequence and itself
  // shifted by p: the suffix [n - z[p] - p, n) repeats with period p.
  std::vector<Key> reversed(keys.rbegin(), keys.rend());
  const std::vector<std::size_t> z = z_function(reversed);
  std::uint64_t period = 0;
  std::size_t suffix_start = 0;
  for (std::size_t p = 1; 2 * p <= n; ++p) {
    if (z[p] < p) continue;                // fewer than two whole periods
    const std::size_t start = n - z[p] - p;
    if (start > last_peak) continue;       // the repetition never reaches the peak
    if (2 * (n - start) < n) continue;     // a loop inside one part of the run
    period = p;
    suffix_start = start;
    break;
  }
  if (period == 0) return split;
  // Phase: the lowest live count among the last `period` allocations, first occurrence.
  std::size_t low = n - period;
  for (std::size_t i = n - period; i < n; ++i) {
    if (keys[i].live < keys[low].live) low = i;
  }
  split.period = period;
  for (std::size_t i = low % period; i < n; i += period) {
    if (i >= suffix_start && i > 0) split.starts.push_back(at[i]);
  }
  return split;
}

void assign_iterations(Trace* trace, const std::vector<std::size_t>& starts) {
  std::uint32_t iteration = 0;
  std::size_t next = 0;
  for (std::size_t i = 0; i < trace->events.size(); ++i) {
    while (next < starts.size() && starts[next] <= i) {
      ++iteration;
      ++next;
    }
    trace->events[i].iteration = iteration;
  }
}

bool median_iteration_ns(const Trace& trace, std::int64_t* out) {
  // First and last time stamp of each iteration that has one.
  std::map<std::uint32_t, std::int64_t> first;
  std::int64_t earliest = -1, latest = -1;
  std::size_t stamped = 0;
  for (const Event& e : trace.events) {
    if (e.time_ns < 0) continue;
    ++stamped;
    first.emplace(e.iteration, e.time_ns);
    earliest = earliest < 0 ? e.time_ns : std::min(earliest, e.time_ns);
    latest = std::max(latest, e.time_ns);
  }
  if (stamped < 2) return false;
  if (first.size() < 2) {
    *out = latest - earliest;
    return true;
  }
  std::vector<std::int64_t> durations;
  for (auto it = first.begin(), next = std::next(first.begin()); next != first.end(); ++it, ++next) {
    durations.push_back(next->second - it->second);
  }
  std::sort(durations.begin(), durations.end());
  const std::size_t m = durations.size() / 2;
  *out = durations.size() % 2 ? durations[m] : durations[m - 1] + (durations[m] - durations[m - 1]) / 2;
  return true;
}

}  // namespace stalloc
