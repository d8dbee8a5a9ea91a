#include "trace/trace.h"

#include <algorithm>
#include <unordered_map>

#include "common/error.h"

namespace stalloc {

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::Unknown: return "unknown";
    case Phase::Forward: return "fwd";
    case Phase::Backward: return "bwd";
    case Phase::Optimizer: return "opt";
    case Phase::Other: return "other";
  }
  return "unknown";
}

bool parse_phase(std::string_view s, Phase* out) {
  for (Phase p : {Phase::Unknown, Phase::Forward, Phase::Backward, Phase::Optimizer, Phase::Other}) {
    if (s == phase_name(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

namespace {

// Walks the events once; on the first problem stores it in *error and stops.
std::vector<Lifetime> derive(const Trace& trace, std::string* error) {
  std::vector<Lifetime> out;
  std::unordered_map<std::uint64_t, std::size_t> live;  // id -> index in out
  live.reserve(1024);
  const auto& ev = trace.events;
  std::int64_t last_time = -1;
  std::uint64_t live_bytes = 0;  // at most 2 * kMaxTraceBytes: no sum wraps
  for (std::size_t i = 0; i < ev.size(); ++i) {
    const Event& e = ev[i];
    const std::string at = "event " + std::to_string(i) + ": ";
    if (e.time_ns >= 0) {
      if (e.time_ns < last_time) {
        *error = at + "time stamp " + std::to_string(e.time_ns) + " ns is before the previous one, " +
                 std::to_string(last_time) + " ns";
        return out;
      }
      last_time = e.time_ns;
    }
    if (e.kind == EventKind::Alloc) {
      if (e.size > kMaxTraceBytes) {
        *error = at + "id " + std::to_string(e.id) + " of " + std::to_string(e.size) +
                 " bytes is larger than any device (2^48 bytes)";
        return out;
      }
      if (live.count(e.id)) {
        *error = "event " + std::to_string(i) + ": id " + std::to_string(e.id) +
                 " allocated again while still live";
        return out;
      }
      Lifetime l;
      l.id = e.id;
      l.size = e.size;
      l.start = i;
      l.end = ev.size();
      l.persistent = true;
      l.stream = e.stream;
      l.iteration = e.iteration;
      l.phase = e.phase;
      l.microbatch = e.microbatch;
      l.layer = e.layer;
      l.thread = e.thread;
      l.dynamic = e.dynamic;
      live_bytes += e.size;
      if (live_bytes > kMaxTraceBytes) {
        *error = at + "the live allocations add up to " + std::to_string(live_bytes) +
                 " bytes, more than any device holds (2^48 bytes)";
        return out;
      }
      live.emplace(e.id, out.size());
      out.push_back(l);
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) {
        *error = "event " + std::to_string(i) + ": free of id " + std::to_string(e.id) +
                 " which is not live";
        return out;
      }
      const Lifetime& l = out[it->second];
      if (e.size != l.size) {
        *error = at + "free of id " + std::to_string(e.id) + " gives " + std::to_string(e.size) +
                 " bytes, its allocation (event " + std::to_string(l.start) + ") " +
                 std::to_string(l.size);
        return out;
      }
      if (e.stream != l.stream) {
        *error = at + "free of id " + std::to_string(e.id) + " on stream " +
                 std::to_string(e.stream) + ", allocated on stream " + std::to_string(l.stream) +
                 " (a tensor is freed on its allocation's stream; other streams' uses are "
                 "record_stream)";
        return out;
      }
      live_bytes -= l.size;
      out[it->second].end = i;
      out[it->second].persistent = false;
      live.erase(it);
    }
  }
  return out;
}

}  // namespace

std::vector<Lifetime> compute_lifetimes(const Trace& trace) {
  std::string error;
  auto out = derive(trace, &error);
  if (!error.empty()) throw UsageError("malformed trace: " + error);
  return out;
}

std::string validate_trace(const Trace& trace) {
  std::string error;
  derive(trace, &error);
  return error;
}

std::uint64_t lower_bound_bytes(const Trace& trace) {
  std::unordered_map<std::uint64_t, std::uint64_t> live;
  std::uint64_t cur = 0, peak = 0;
  for (const Event& e : trace.events) {
    if (e.kind == EventKind::Alloc) {
      live[e.id] = e.size;
      cur += e.size;
      peak = std::max(peak, cur);
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) continue;
      cur -= it->second;
      live.erase(it);
    }
  }
  return peak;
}

}  // namespace stalloc
