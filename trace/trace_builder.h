// Builds a Trace event by event, for the workload generator and the tests: hands out allocation
// ids, stamps every event with the builder's current position (iteration, phase, micro-batch,
// layer, thread, time), and remembers each live allocation so that its Free repeats its size,
// stream and dynamic hint. Frees of an allocation that is not live are refused, so a built
// trace is always well formed.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "trace/trace.h"

namespace stalloc {

// What the builder writes into every event besides the request itself.
struct EventStamp {
  Phase phase = Phase::Unknown;
  std::int32_t microbatch = -1;
  std::int32_t layer = -1;
  std::uint16_t thread = 0;
};

class TraceBuilder {
 public:
  // Builds into a trace of its own (trace()), or appends to `into`, which outlives the builder.
  TraceBuilder() : trace_(&own_) {}
  explicit TraceBuilder(Trace& into) : trace_(&into) {}
  TraceBuilder(const TraceBuilder&) = delete;
  TraceBuilder& operator=(const TraceBuilder&) = delete;

  // An allocation with the next id (ids count from 1); returns the id.
  std::uint64_t alloc(std::uint64_t size, std::uint32_t stream = 0, bool dynamic = false);
  // An allocation with the caller's id; throws std::logic_error if that id is live.
  TraceBuilder& alloc_as(std::uint64_t id, std::uint64_t size, std::uint32_t stream = 0,
                         bool dynamic = false);
  // Frees a live allocation; throws std::logic_error if `id` is not one.
  TraceBuilder& free(std::uint64_t id);
  // The live allocation's event, or null.
  const Event* live(std::uint64_t id) const;

  EventStamp& stamp() { return stamp_; }
  void set_iteration(std::uint32_t iteration) { iteration_ = iteration; }
  // The events from now on belong to `iteration` (set_iteration, for a chain of calls).
  TraceBuilder& at(std::uint32_t iteration) {
    iteration_ = iteration;
    return *this;
  }
  void next_iteration() { ++iteration_; }
  std::uint32_t iteration() const { return iteration_; }
  // Host time stamp of the events from now on (-1: unknown).
  void set_time(std::int64_t time_ns) { time_ns_ = time_ns; }

  const Trace& trace() const { return *trace_; }
  Trace& trace() { return *trace_; }

 private:
  Event make(EventKind kind, std::uint64_t id, std::uint64_t size, std::uint32_t stream) const;

  Trace own_;
  Trace* trace_;
  std::uint64_t next_id_ = 1;
  std::uint32_t iteration_ = 0;
  std::int64_t time_ns_ = -1;
  EventStamp stamp_;
  std::unordered_map<std::uint64_t, Event> live_;
};

}  // namespace stalloc
