// A c10 CPU allocator that records every allocation and free of a libtorch run as a stalloc
// Trace, tagged with what the training loop says it is doing (iteration, phase, micro-batch,
// layer).
//
// It wraps the default CPU allocator and is installed in its place with c10::SetCPUAllocator,
// so every CPU tensor libtorch creates goes through it. c10 deleters are plain function pointers
// without state, so the allocator is a process-wide singleton: the deleter finds it through a
// static pointer and finds the allocation's id and size in a table keyed by address. The data
// pointer is also the DataPtr context, as the default allocator does, which keeps
// Allocator::raw_allocate/raw_deallocate working.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "trace/trace.h"

namespace stalloc::capture {

// What the training loop is doing now; every event recorded carries the tag current at its time.
struct RecordingTag {
  std::uint32_t iteration = 0;
  Phase phase = Phase::Other;
  std::int32_t microbatch = -1;
  std::int32_t layer = -1;
};

struct RecordingCounts {
  std::uint64_t ignored_frees = 0;     // frees of blocks allocated while not recording
  std::uint64_t zero_byte_allocs = 0;  // not recorded: they own no memory
  std::uint64_t threads = 0;           // distinct host threads that allocated or freed
};

class RecordingAllocator final : public c10::Allocator {
 public:
  // Installs the recorder as libtorch's CPU allocator. Call once, before any tensor is made.
  static RecordingAllocator& install();

  c10::DataPtr allocate(std::size_t bytes) const override;
  c10::DeleterFnPtr raw_deleter() const override;

  // Recording covers the requests between start() and stop(); the calling thread of start()
  // becomes thread 0. Without timestamps every event's time_ns is -1 (unknown).
  void start(bool timestamps);
  void stop();

  void set_tag(const RecordingTag& tag);
  void set_layer(std::int32_t layer);
  RecordingTag tag() const;

  // The events recorded so far (allocations still live are persistent in the trace).
  Trace take_trace();
  RecordingCounts counts() const;

 private:
  struct LiveBlock {
    std::uint64_t id = 0;
    std::uint64_t size = 0;
  };

  explicit RecordingAllocator(c10::Allocator* inner);
  static void release(void* ptr);
  void record_free(void* ptr);
  Event make_event(EventKind kind, std::uint64_t id, std::uint64_t size) const;  // lock held

  c10::Allocator* inner_;
  c10::DeleterFnPtr inner_deleter_;
  mutable std::mutex mutex_;
  bool recording_ = false;
  bool timestamps_ = false;
  std::int64_t start_ns_ = 0;
  RecordingTag tag_;
  mutable Trace trace_;
  mutable std::unordered_map<void*, LiveBlock> live_;
  mutable std::uint64_t next_id_ = 1;
  mutable RecordingCounts counts_;
};

}  // namespace stalloc::capture
