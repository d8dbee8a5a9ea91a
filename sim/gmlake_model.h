// A model of GMLake (Guo et al., ASPLOS 2024): PyTorch's caching allocator whose large-pool
// segments are physical blocks of 2 MiB chunks behind CUDA VMM, plus virtual memory stitching.
// When a large request (>= the stitch threshold, 512 MiB by default) finds no single cached
// block, GMLake maps free blocks - any of them, not contiguous - side by side into a new virtual
// range instead of allocating new memory (the paper's strategy S3, before S4 "allocate"). The
// chosen blocks are taken largest first until they cover the request; a last block that
// overshoots by a chunk or more is split. A freed stitched range keeps its mapping, and a later
// request that fits it reuses it while all its pieces are still free (no VMM calls then).
//
// Facts taken from the paper and the released code, not its code: large requests are whole
// chunks; the small pool (<= 1 MiB) stays on cudaMalloc'ed 2 MiB segments; reserved memory is
// the physical chunks, never the stitched virtual ranges. Where the released code differs from
// the paper (it stitches only after a new segment failed, with a 32 MiB threshold), the model
// follows the paper; docs/simulator.md says so.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "sim/pytorch_caching_model.h"

namespace stalloc {

class GmlakeModel : public PytorchCachingModel {
 public:
  GmlakeModel(const PytorchAllocConf& conf, std::uint64_t capacity, std::uint64_t granularity,
              std::uint64_t stitch_threshold);

  // Stitches made so far (new virtual ranges) and reuses of a cached stitched range.
  std::uint64_t stitches() const { return stitches_; }
  std::uint64_t stitch_reuses() const { return stitch_reuses_; }

 protected:
  std::uint64_t pool_size(std::uint64_t requested) const override;
  bool serve_from_cache(const Event& e, std::uint64_t size, std::uint64_t* address) override;
  bool release_other(const Event& e) override;
  void count_segment_create(std::uint64_t bytes, bool small) override;
  void count_segment_release(std::uint64_t bytes, bool small) override;

 private:
  struct Piece {
    std::uint64_t addr = 0;
    std::uint64_t size = 0;
  };
  struct StitchedRange {  // a virtual range mapped onto the chunks of its pieces
    std::uint64_t address = 0;
    std::uint64_t size = 0;
    std::uint32_t stream = 0;
    std::vector<Piece> pieces;
  };
  struct LiveStitch {
    StitchedRange range;
    std::vector<Block*> blocks;
  };

  bool reuse_cached_range(const Event& e, std::uint64_t size, std::uint64_t* address);
  // The free large-pool block of `stream` holding exactly [addr, addr + size), carved out of the
  // free block that contains it; nullptr when that range is not wholly free.
  Block* carve(std::uint32_t stream, const Piece& piece);
  std::uint64_t chunks(std::uint64_t bytes) const { return bytes / granularity_; }
  // A range of `bytes` reserved and mapped chunk by chunk, access set once (`fresh`: its chunks
  // created too); unmapped chunk by chunk and its addresses freed (`release`: chunks released).
  void count_range_mapped(std::uint64_t bytes, bool fresh);
  void count_range_unmapped(std::uint64_t bytes, bool release);

  std::uint64_t granularity_;
  std::uint64_t stitch_threshold_;
  std::uint64_t stitches_ = 0;
  std::uint64_t stitch_reuses_ = 0;
  std::unordered_map<std::uint64_t, LiveStitch> live_stitches_;  // allocation id -> stitch
  std::multimap<std::uint64_t, StitchedRange> cached_ranges_;    // freed ranges by size
};

}  // namespace stalloc
