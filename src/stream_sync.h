// Stream ordering between a chunk's users. Memory freed on one stream and reused on another
// needs the new stream to wait for the old one's work; the host must never block for it.
// cuStreamWaitEvent makes the new stream wait asynchronously, on an event recorded on the old
// stream after every kernel that used the memory, that is at or after its free:
// - the old stream's free mark, when one was recorded after the memory's free: it covers the
//   kernels that used the memory and little of what came after;
// - else an event recorded on the old stream at the reuse: it also covers everything enqueued
//   there since the free, so the new stream waits for work that has nothing to do with the
//   memory (a communication stream made to wait for the compute queued after the free, and the
//   other way round).
// Free marks: each free is noted (note_free); a stream's mark, one event recorded again and
// again, is recorded at a free on it when its last mark is kFreesPerMark frees (of any stream)
// old, so a stream that frees often records at one free in kFreesPerMark and one that frees
// rarely at each. A FreeStamp (now(), read at the free, before note_free) tells whether a mark
// came after a memory's free; memory whose stamp is unknown (kUnstamped) always falls back.
// Streams are named by small indices in first-seen order (0 is the default stream), so a set of
// streams is a 64-bit mask; streams past the 63rd share the last bit.
#pragma once

#include <cstdint>
#include <unordered_map>
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

  // When memory was freed, in marks made so far: a mark made later has a larger stamp.
  using FreeStamp = std::uint64_t;
  static constexpr FreeStamp kUnstamped = ~FreeStamp{0};  // unknown: no mark stands for it
  static constexpr std::uint64_t kFreesPerMark = 16;
  FreeStamp now() const { return marks_made_; }

  // Makes stream `to` wait for the work on every stream in `users` but itself: up to that
  // stream's free mark if it was made after `freed` (the stamp of the memory's last free),
  // else the work enqueued so far. Returns false when the driver refused (the caller then must
  // not reuse the memory). `users` must name streams whose use of the memory ended with a free
  // at or before `freed`.
  bool order_after(StreamMask users, std::uint32_t to, FreeStamp freed = kUnstamped);

  // A free of memory that the streams of `users` used: marks those of them whose last mark is
  // kFreesPerMark frees old, or that have none. Nothing while one stream is known (nothing
  // changes stream then). Returns false when the driver refused a record; that stream loses its
  // mark (order_after falls back).
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
  std::unordered_map<vmm::StreamHandle, std::uint32_t> index_{{0, 0}};  // handle -> index, O(1)
  std::vector<vmm::EventHandle> free_events_;
  std::vector<vmm::EventHandle> all_events_;
  struct Mark {
    vmm::EventHandle event = 0;  // 0: none
    FreeStamp stamp = 0;         // now() just after it was made
    std::uint64_t at_free = 0;   // frees_ when it was made
  };
  std::vector<Mark> marks_;  // by stream index
  FreeStamp marks_made_ = 0;
  std::uint64_t frees_ = 0;
  std::uint64_t waits_ = 0;
  std::uint64_t mark_waits_ = 0;
};

}  // namespace stalloc
