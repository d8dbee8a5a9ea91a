// Stream ordering between a chunk's users. Memory freed on one stream and reused on another
// needs the new stream to wait for the old one's work; the host must never block for it.
// cuStreamWaitEvent makes the new stream wait asynchronously, on an event that covers every
// kernel enqueued on the old stream before the free:
// - without free marks, one recorded on the old stream when the reuse happens: it also covers
//   everything enqueued there since the free, so the new stream waits for work that has nothing
//   to do with the memory (a communication stream made to wait for the compute queued after
//   the free, and the other way round);
// - with free marks (note_free, called at every free once a second stream exists), the latest
//   mark of the old stream: recorded at a free at or after this memory's free, it covers the
//   kernels that used the memory and less of what came after.
// Streams are named by small indices in first-seen order (0 is the default stream), so a set of
// streams is a 64-bit mask; streams past the 63rd share the last bit.
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

  // Makes stream `to` wait for the work on every stream in `users` but itself: up to that
  // stream's latest free mark if it has one, else the work enqueued so far. Returns false when
  // the driver refused (the caller then must not reuse the memory). `users` must name streams
  // whose use of the memory ended with a free (the free marks stand for those frees).
  bool order_after(StreamMask users, std::uint32_t to);

  // Marks the point of a free on each stream of `users` (the freed memory's users): one event
  // per stream, recorded again at each free. Sound only if it is called at every free from the
  // first mark on: a mark older than some memory's free would let its reuse start before the
  // kernels that used it end. Does nothing, and makes no mark, while one stream is known
  // (nothing changes stream then; a free before the second stream appears is covered by the
  // fallback of order_after, or by a later mark). Returns false when the driver refused; the
  // streams concerned lose their mark (order_after falls back).
  bool note_free(StreamMask users);
  // order_after's waits on a free mark rather than on an event recorded at the reuse.
  std::uint64_t waits_on_free_marks() const { return mark_waits_; }

  // Records an event on each stream of `users` into events, for a later completion query.
  bool record(StreamMask users, std::vector<vmm::EventHandle>* events);
  // True when every event has completed; the events go back to the free list then.
  bool completed(std::vector<vmm::EventHandle>* events);
  // Gives events back unqueried (the wait they stood for is no longer needed).
  void discard(std::vector<vmm::EventHandle>* events);

  std::uint64_t waits() const { return waits_; }

  // Blocks until the work enqueued so far on every known stream is done (the runtime's teardown
  // only): one device synchronisation, or where the driver has none an event recorded on each
  // stream, queried until it completes. False when the driver refused a record or a query.
  bool wait_for_streams();

 private:
  vmm::EventHandle take_event();
  template <typename F>
  bool for_each_stream(StreamMask users, F&& f);

  vmm::Driver& driver_;
  std::vector<vmm::StreamHandle> handles_{0};
  std::vector<vmm::EventHandle> free_events_;
  std::vector<vmm::EventHandle> all_events_;
  std::vector<vmm::EventHandle> free_marks_;  // by stream index; 0: no mark
  std::uint64_t waits_ = 0;
  std::uint64_t mark_waits_ = 0;
};

}  // namespace stalloc
