// Events that say when the GPU is done with memory frees released, shared by the frees of a
// stretch: memory freed and kept (a packed arena's emptied page, a cached dedicated range) may
// go elsewhere, or back to the driver, only once the kernels that used it have finished, and an
// event recorded on its streams after its free says when. One recorded at every free cost an
// event record for most frees (llama7b-tp4pp2vpp2's profiled iterations: 23.5k per iteration
// for the dedicated ranges alone; llama7b-varlen cycling six lengths: 1.6-3k per steady
// iteration in the arenas). A marker is shared by the memory of up to kFreesPerMarker frees and
// recorded after the last of them, or earlier when some of that memory is wanted (done() on a
// marker not yet recorded records it): recorded after every free it stands for, it covers each.
#pragma once

#include <cstdint>
#include <vector>

#include "src/stream_sync.h"

namespace stalloc {

class FreeMarkers {
 public:
  static constexpr std::uint32_t kNone = UINT32_MAX;
  static constexpr std::uint32_t kFreesPerMarker = 16;

  explicit FreeMarkers(StreamSync& sync) : sync_(sync) {}
  ~FreeMarkers();
  FreeMarkers(const FreeMarkers&) = delete;
  FreeMarkers& operator=(const FreeMarkers&) = delete;

  // The marker for memory a free releases now, used by `users`, with one more holder; kNone
  // (nothing to wait for) when users is 0. Call end_free once the free has taken its markers.
  std::uint32_t take(StreamMask users);
  // One more holder of a marker taken in this free.
  void add_holder(std::uint32_t marker);
  // Closes the open marker once kFreesPerMarker frees have taken it.
  void end_free(std::uint32_t marker);
  // Whether the GPU is done with the memory; records the marker if it was still open. False
  // for good when the driver refused the record.
  bool done(std::uint32_t marker);
  // A holder lets go (its memory is used again or unmapped); the last one recycles the marker.
  void release(std::uint32_t marker);

 private:
  struct Marker {
    std::vector<vmm::EventHandle> events;
    std::uint32_t holders = 0;
    std::uint32_t frees = 0;
    StreamMask users = 0;
    bool recorded = false;
    bool failed = false;
    bool done = false;
  };
  void record(std::uint32_t marker);

  StreamSync& sync_;
  std::vector<Marker> markers_;
  std::vector<std::uint32_t> free_;
  std::uint32_t open_ = kNone;
};

}  // namespace stalloc
