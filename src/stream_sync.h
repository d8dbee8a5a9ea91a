// Stream ordering between a chunk's users. Memory freed on one stream and reused on another
// needs the new stream to wait for the old one's work; the host must never block for it. The
// wait is made lazily, when the reuse happens: an event recorded then on the old stream covers
// every kernel enqueued there before the free, and cuStreamWaitEvent makes the new stream wait
// asynchronously. Streams are named by small indices in first-seen order (0 is the default
// stream), so a set of streams is a 64-bit mask; streams past the 63rd share the last bit.
#pragma once

#include <cstdint>
#include <vector>

#include "vmm/driver.h"

namespace stalloc {

using StreamMask = std::uint64_t;

class StreamSync {
 public:
  static constexpr std::uint32_t kSharedBit = 63;

  explicit StreamSync(vmm::Driver& driver);
  ~StreamSync();
  StreamSync(const StreamSync&) = delete;
  StreamSync& operator=(const StreamSync&) = delete;

  // The stream's index, registering it on first sight.
  std::uint32_t index_of(vmm::StreamHandle stream);
  vmm::StreamHandle handle_of(std::uint32_t index) const { return handles_[index]; }
  std::uint32_t streams() const { return static_cast<std::uint32_t>(handles_.size()); }
  static StreamMask bit(std::uint32_t index) {
    return StreamMask{1} << (index < kSharedBit ? index : kSharedBit);
  }

  // Makes stream `to` wait for the work enqueued so far on every stream in `users` but itself.
  // Returns false when the driver refused (the caller then must not reuse the memory).
  bool order_after(StreamMask users, std::uint32_t to);

  // Records an event on each stream of `users` into events, for a later completion query.
  bool record(StreamMask users, std::vector<vmm::EventHandle>* events);
  // True when every event has completed; the events go back to the free list then.
  bool completed(std::vector<vmm::EventHandle>* events);
  // Gives events back unqueried (the wait they stood for is no longer needed).
  void discard(std::vector<vmm::EventHandle>* events);

  std::uint64_t waits() const { return waits_; }

 private:
  vmm::EventHandle take_event();
  template <typename F>
  bool for_each_stream(StreamMask users, F&& f);

  vmm::Driver& driver_;
  std::vector<vmm::StreamHandle> handles_{0};
  std::vector<vmm::EventHandle> free_events_;
  std::vector<vmm::EventHandle> all_events_;
  std::uint64_t waits_ = 0;
};

}  // namespace stalloc
