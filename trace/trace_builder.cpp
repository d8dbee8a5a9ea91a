#include "trace/trace_builder.h"

#include <stdexcept>
#include <string>

namespace stalloc {

Event TraceBuilder::make(EventKind kind, std::uint64_t id, std::uint64_t size,
                         std::uint32_t stream) const {
  Event e;
  e.kind = kind;
  e.id = id;
  e.size = size;
  e.stream = stream;
  e.iteration = iteration_;
  e.time_ns = time_ns_;
  e.phase = stamp_.phase;
  e.microbatch = stamp_.microbatch;
  e.layer = stamp_.layer;
  e.thread = stamp_.thread;
  return e;
}

std::uint64_t TraceBuilder::alloc(std::uint64_t size, std::uint32_t stream, bool dynamic) {
  while (live_.count(next_id_) != 0) ++next_id_;
  const std::uint64_t id = next_id_++;
  alloc_as(id, size, stream, dynamic);
  return id;
}

TraceBuilder& TraceBuilder::alloc_as(std::uint64_t id, std::uint64_t size, std::uint32_t stream,
                                     bool dynamic) {
  Event e = make(EventKind::Alloc, id, size, stream);
  e.dynamic = dynamic;
  if (!live_.emplace(id, e).second) {
    throw std::logic_error("trace builder: allocation " + std::to_string(id) + " is live already");
  }
  trace_->events.push_back(e);
  return *this;
}

TraceBuilder& TraceBuilder::free(std::uint64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) {
    throw std::logic_error("trace builder: free of allocation " + std::to_string(id) +
                           ", which is not live");
  }
  Event e = make(EventKind::Free, id, it->second.size, it->second.stream);
  e.dynamic = it->second.dynamic;
  live_.erase(it);
  trace_->events.push_back(e);
  return *this;
}

const Event* TraceBuilder::live(std::uint64_t id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : &it->second;
}

}  // namespace stalloc
