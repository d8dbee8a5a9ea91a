// The generator's idioms over the trace builder (trace/trace_builder.h): tensors are ids, 0 for
// none (PyTorch does not call its allocator for empty tensors); freeing a tensor clears it; a
// scope (phase, micro-batch, layer, thread) is set for a block and restored after it.
#pragma once

#include <cstdint>

#include "trace/trace_builder.h"

namespace stalloc::gen {

using Tensor = std::uint64_t;  // an allocation id; 0 = no tensor (empty or not allocated)
using Scope = EventStamp;

class TensorBuilder {
 public:
  explicit TensorBuilder(Trace* trace) : builder_(*trace) { builder_.stamp().phase = Phase::Other; }

  void set_iteration(std::uint32_t iteration) { builder_.set_iteration(iteration); }
  Scope& scope() { return builder_.stamp(); }

  // Zero bytes give no tensor.
  Tensor alloc(std::uint64_t bytes, bool dynamic = false, std::uint32_t stream = 0) {
    return bytes == 0 ? 0 : builder_.alloc(bytes, stream, dynamic);
  }
  // Frees t and clears it; a no-op for no tensor.
  void free(Tensor& t) {
    if (t == 0) return;
    builder_.free(t);
    t = 0;
  }
  // A temporary that dies as soon as it is made (a weight gradient added into main_grad, an
  // output nobody keeps).
  void transient(std::uint64_t bytes, bool dynamic = false) {
    Tensor t = alloc(bytes, dynamic);
    free(t);
  }
  std::uint64_t size_of(Tensor t) const {
    const Event* e = builder_.live(t);
    return e == nullptr ? 0 : e->size;
  }

 private:
  TraceBuilder builder_;
};

// Sets the builder's scope for a block and restores the previous one after it.
class ScopeGuard {
 public:
  ScopeGuard(TensorBuilder& b, Scope s) : builder_(b), saved_(b.scope()) { b.scope() = s; }
  ~ScopeGuard() { builder_.scope() = saved_; }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  TensorBuilder& builder_;
  Scope saved_;
};

}  // namespace stalloc::gen
