// Event emission for the generator: hands out allocation ids, stamps every event with the
// current iteration, phase, micro-batch, layer and thread, and remembers sizes and streams so a
// Free repeats its allocation's.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <unordered_map>

#include "trace/trace.h"

namespace stalloc::gen {

using Tensor = std::uint64_t;  // an allocation id; 0 = no tensor (empty or not allocated)

struct Scope {
  Phase phase = Phase::Other;
  std::int32_t microbatch = -1;
  std::int32_t layer = -1;
  std::uint16_t thread = 0;
};

class TraceBuilder {
 public:
  explicit TraceBuilder(Trace* trace) : trace_(trace) {}

  void set_iteration(std::uint32_t iteration) { iteration_ = iteration; }
  Scope& scope() { return scope_; }

  // PyTorch does not call its allocator for empty tensors: zero bytes give no tensor.
  Tensor alloc(std::uint64_t bytes, bool dynamic = false, std::uint32_t stream = 0) {
    if (bytes == 0) return 0;
    Event e = stamp(EventKind::Alloc, next_id_++, bytes, stream);
    e.dynamic = dynamic;
    live_.emplace(e.id, e);
    trace_->events.push_back(e);
    return e.id;
  }

  // Frees t and clears it; a no-op for no tensor.
  void free(Tensor& t) {
    if (t == 0) return;
    auto it = live_.find(t);
    if (it == live_.end()) throw std::logic_error("generator: free of a tensor that is not live");
    Event e = stamp(EventKind::Free, t, it->second.size, it->second.stream);
    e.dynamic = it->second.dynamic;
    live_.erase(it);
    trace_->events.push_back(e);
    t = 0;
  }

  // A temporary that dies as soon as it is made (a weight gradient added into main_grad, an
  // output nobody keeps).
  void transient(std::uint64_t bytes, bool dynamic = false) {
    Tensor t = alloc(bytes, dynamic);
    free(t);
  }

  std::uint64_t size_of(Tensor t) const {
    auto it = live_.find(t);
    return it == live_.end() ? 0 : it->second.size;
  }

 private:
  Event stamp(EventKind kind, std::uint64_t id, std::uint64_t size, std::uint32_t stream) const {
    Event e;
    e.kind = kind;
    e.id = id;
    e.size = size;
    e.stream = stream;
    e.iteration = iteration_;
    e.phase = scope_.phase;
    e.microbatch = scope_.microbatch;
    e.layer = scope_.layer;
    e.thread = scope_.thread;
    return e;
  }

  Trace* trace_;
  std::uint64_t next_id_ = 1;
  std::uint32_t iteration_ = 0;
  Scope scope_;
  std::unordered_map<std::uint64_t, Event> live_;
};

// Sets the builder's scope for a block and restores the previous one after it.
class ScopeGuard {
 public:
  ScopeGuard(TraceBuilder& b, Scope s) : builder_(b), saved_(b.scope()) { b.scope() = s; }
  ~ScopeGuard() { builder_.scope() = saved_; }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  TraceBuilder& builder_;
  Scope saved_;
};

}  // namespace stalloc::gen
