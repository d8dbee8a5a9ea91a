// Large tensors that no plan serves (the profiled iterations, workloads of one iteration,
// weights and optimizer state made before the first plan) each get a range of their own: one
// physical chunk of the tensor's size rounded up to the granularity, one reservation, one
// mapping, one access call.
//
// Why not the packed arenas: their pages are chunks of the granularity, and the driver's cost
// is per call, not per byte (docs/driver_costs.md): a 1 GiB tensor on 2 MiB pages is 512
// cuMemCreate and 512 cuMemMap calls, here it is one of each. The rounding wastes less than one
// granule per live tensor, a few percent at most above the size threshold.
//
// A freed range stays mapped in a cache, and a request of the same rounded size takes it back
// with no call: training makes the same tensors every iteration. A request the cache cannot
// serve creates a chunk; only where that would take the runtime above the most it ever held
// does it first release cached ranges (the oldest first, those whose GPU work is done) and ask
// for the arenas' idle pages, as many bytes as it would go over. So the cache never raises the
// peak, and below it keeps its ranges for their next tensor: releasing one range to make another
// of a different size, request after request, cost llama7b-tp2pp2-r's profiled iteration 12 k
// creates and 12 k releases (est. 7.3 s against 2.5 s).
//
// At the most ever held, sizes still trade places in phases: the forward pass's activations,
// then the backward pass's gradients, micro-batch after micro-batch. A miss there that cached
// ranges the GPU is done with add up to exactly (at most kStitchParts of them) is stitched from
// them (below) rather than paid for by releasing them, and a freed stitch stays mapped while
// its parts are cached: the next request of its size takes it whole, and each part's own size
// takes the part, with no call either way. A part is released only with the stitches that map
// it. gpt2-1024-mbs128-r's first profiled iteration made about 1,000 ranges (est. 11.4% of its
// iteration on an H200), now 6.6%, at the same utilization (docs/decisions.md,
// "Stitched ranges at the most ever held").
//
// Streams: a range remembers the streams that used it; reused on another stream, that stream
// waits on events recorded then (never the host), as the arenas do. A marker shared by the frees
// of a stretch (free_markers.h) says when a freed range's GPU work is done, so that it is
// released only then.
//
// While the GPU runs behind, that leaves a miss above the most ever held with nothing it may
// release: every cached range still waits for its kernels. Rather than create a range beside
// them, such a miss is served in stream order from what is cached (its tensor's kernels queue
// after the ones that used the bytes; nothing waits on the host), as PyTorch's allocator splits
// a cached segment: a cached range up to 1/8 larger than it needs, whole; else the best-fitting
// gap of a range already shared between tensors this way; else the smallest larger cached
// range, if at most twice the size, which becomes shared. A shared range is cached whole again
// once its last tensor goes. Without lag none of this happens (what the GPU is done with is
// released first; both suites identical). Under a lag of 3 queries the first took
// llama7b-tp2pp2-r from 94.7% to 97.7% (97.3% with sharing, which holds a range out of reach of
// a later request of its own size), sharing gpt2-1024-mbs128-r from 83.9% to 92.4% (its sizes
// are 4/3 to 2x apart); sharing ranges up to 3x or 4x larger cost other workloads more
// (docs/decisions.md, "Dedicated ranges while the GPU runs behind"). Last, a miss larger than every cached range is
// stitched from several smaller ones (at most kStitchParts): their chunks are mapped again side
// by side in a reservation of its own (a chunk may be mapped at several addresses; their own
// mappings stay), one access call over it, and its tensor ordered after the parts' users. Freed,
// the parts are cached again at once and the stitch is kept mapped as above (at most
// kCachedStitches, the oldest unmapped first once the GPU is done with them).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/free_markers.h"
#include "src/physical_memory.h"
#include "src/reclaimer.h"
#include "src/stream_sync.h"
#include "src/sub_allocator.h"
#include "vmm/driver.h"

namespace stalloc {

class DedicatedRanges final : public SubAllocator {
 public:
  // reclaimer: asked, when a range must be created and the cache could not release as many
  // bytes, to release what is held idle elsewhere (Reclaimer::bytes_for_range).
  DedicatedRanges(vmm::Driver& driver, PhysicalMemory& memory, StreamSync& sync,
                  Reclaimer& reclaimer = no_reclaimer());
  ~DedicatedRanges();
  DedicatedRanges(const DedicatedRanges&) = delete;
  DedicatedRanges& operator=(const DedicatedRanges&) = delete;

  vmm::DevicePtr allocate(std::uint64_t size, std::uint32_t stream, std::string* why) override;
  bool free(vmm::DevicePtr ptr, StreamMask used_by) override;
  // Releases every cached range whose GPU work is done; returns how many.
  std::uint64_t release_cached();
  // Releases cached ranges, the oldest first, skipping those the GPU still uses, until `bytes`
  // are released or none is left; returns the bytes released.
  std::uint64_t release_for(std::uint64_t bytes);

  std::uint64_t live_bytes() const { return live_bytes_; }
  // The chunks of the live ranges (their sizes rounded up to the granularity; a scan).
  std::uint64_t live_range_bytes() const;
  std::uint64_t cached_bytes() const { return cached_bytes_; }
  std::size_t cached_ranges() const { return cached_.size(); }
  // Requests served in stream order from cached ranges the GPU still used (the header comment).
  std::uint64_t served_behind_gpu() const { return served_behind_gpu_; }

 private:
  struct Range {
    vmm::DevicePtr address = 0;
    std::uint64_t bytes = 0;  // of the chunk, the reservation and the mapping
    std::uint64_t size = 0;   // requested, while live
    Chunk chunk;
    StreamMask users = 0;                          // streams that used it
    StreamSync::FreeStamp freed = StreamSync::kUnstamped;  // cached: its free's stamp
    std::uint32_t marker = FreeMarkers::kNone;  // cached: when the GPU is done with it
  };

  // A range made of cached ranges mapped side by side (the header comment), live.
  struct Stitch {
    vmm::DevicePtr address = 0;
    std::uint64_t bytes = 0;  // the reservation: the parts' bytes together
    std::uint64_t size = 0;   // requested
    StreamMask users = 0;
    std::vector<Range> parts;
  };
  // A freed stitch, kept mapped for the next request of its size while its parts are cached;
  // unmapped only once its marker says the GPU is done with it.
  struct FreedStitch {
    vmm::DevicePtr address = 0;
    std::uint64_t bytes = 0;
    std::vector<std::uint64_t> part_bytes;
    std::vector<vmm::ChunkHandle> part_chunks;
    StreamMask users = 0;
    std::uint32_t marker = FreeMarkers::kNone;
  };

  // A range shared by tensors while the GPU is behind: their blocks by offset (bytes taken).
  struct Shared {
    Range range;  // users and freed: of every tensor it held since it was cached
    std::map<std::uint64_t, std::uint64_t> blocks;
  };
  struct Piece {
    std::list<Shared>::iterator shared;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;  // requested
  };

  // Hands a cached range to a tensor of `size` bytes on `stream` (ordered after the range's
  // earlier users); 0, the range left cached, when the stream cannot be ordered after them.
  vmm::DevicePtr take_cached(std::list<Range>::iterator it, std::uint64_t size,
                             std::uint32_t stream);
  // A miss the GPU leaves nothing to release for, served from the cache in stream order (the
  // header comment); 0 when nothing cached fits.
  vmm::DevicePtr serve_behind_gpu(std::uint64_t bytes, std::uint64_t size, std::uint32_t stream);
  // A block of `bytes` at `offset` of a shared range for a tensor of `size` on `stream`.
  vmm::DevicePtr take_piece(std::list<Shared>::iterator shared, std::uint64_t offset,
                            std::uint64_t bytes, std::uint64_t size, std::uint32_t stream);
  bool free_piece(vmm::DevicePtr ptr, StreamMask used_by);
  // A miss served on several cached ranges mapped again side by side; 0 when they cannot cover
  // it or the calls fail (nothing left behind then).
  // Any: whatever is cached may be a part (ordered after its users), and the parts may cover
  // more than the request. DoneExactly: only ranges the GPU is done with, adding up to it.
  enum class StitchFrom { Any, DoneExactly };
  vmm::DevicePtr stitch(std::uint64_t bytes, std::uint64_t size, std::uint32_t stream,
                        StitchFrom from);
  bool free_stitched(vmm::DevicePtr ptr, StreamMask used_by);
  // A freed stitch of `bytes` whose parts are all cached, taken whole with no call; 0 if none.
  vmm::DevicePtr take_cached_stitch(std::uint64_t bytes, std::uint64_t size, std::uint32_t stream);
  std::list<FreedStitch>::iterator unmap_stitch(std::list<FreedStitch>::iterator it);
  // Unmaps the cached stitches that map `chunk` (those the GPU is done with); true when none
  // maps it any more, so that it may be released.
  bool unstitch(vmm::ChunkHandle chunk);
  // Out of the cache, its marker dropped.
  Range uncache(std::list<Range>::iterator it);
  // Live, for a tensor of `size` bytes on `stream`.
  vmm::DevicePtr hand_out(Range range, std::uint64_t size, std::uint32_t stream);
  // Back in the cache, as a freed range is (free()).
  void cache(Range range);
  // Unmaps and releases a range whose GPU work is done (or that no stream used).
  void destroy(Range& range);
  // Whether the GPU is done with what a marker covers (no marker: nothing to wait for unless a
  // stream used it).
  bool gpu_done(std::uint32_t marker, StreamMask users);
  bool gpu_done(const Range& range) { return gpu_done(range.marker, range.users); }
  bool gpu_done(const FreedStitch& s) { return gpu_done(s.marker, s.users); }

  vmm::Driver& driver_;
  PhysicalMemory& memory_;
  StreamSync& sync_;
  FreeMarkers markers_;
  Reclaimer& reclaimer_;
  std::uint64_t granularity_;
  std::unordered_map<vmm::DevicePtr, Range> live_;
  std::list<Range> cached_;  // oldest first
  std::list<Shared> shared_;
  std::unordered_map<vmm::DevicePtr, Piece> pieces_;  // the shared ranges' tensors
  std::unordered_map<vmm::DevicePtr, Stitch> stitched_;
  std::list<FreedStitch> stitches_cached_;  // oldest first
  // Chunks still mapped in a stitch, and in how many: never released until then.
  std::unordered_map<vmm::ChunkHandle, std::uint32_t> stitched_chunks_;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t cached_bytes_ = 0;
  std::uint64_t served_behind_gpu_ = 0;
};

}  // namespace stalloc
