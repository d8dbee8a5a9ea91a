// The physical chunks that installed plans map, shared by every plan in the cache (only one
// iteration runs at a time, so the pool is as large as the largest plan), and who occupies
// them. A plan is only trusted as far as it is followed: before a slot takes its chunks the
// pool checks that no live tenant holds the same bytes (a tensor of the previous iteration
// still alive, a slot of another plan, a request that came out of order) and refuses
// otherwise, so a wrong match costs a dynamic allocation, never corrupted data.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/physical_memory.h"

namespace stalloc {

// Bytes [lo, hi) of pool chunk `chunk` (offsets inside the chunk).
struct ChunkPiece {
  std::uint32_t chunk = 0;
  std::uint32_t lo = 0;
  std::uint32_t hi = 0;
};

class PlanPool {
 public:
  explicit PlanPool(PhysicalMemory& memory);
  ~PlanPool();
  PlanPool(const PlanPool&) = delete;
  PlanPool& operator=(const PlanPool&) = delete;

  // Grows the pool to `count` chunks; false (pool unchanged) when memory runs out.
  bool grow_to(std::size_t count);
  std::size_t size() const { return chunks_.size(); }
  std::uint64_t granularity() const { return memory_.granularity(); }
  vmm::ChunkHandle handle(std::uint32_t chunk) const { return chunks_[chunk].chunk.handle; }

  // Occupies the pieces when none overlaps a live tenant; *sync_with gets the streams whose
  // earlier work on them the new tenant must be ordered after.
  bool try_occupy(std::span<const ChunkPiece> pieces, StreamMask* sync_with);
  // Ends a tenancy; `used_by` are the streams that used the pieces.
  void vacate(std::span<const ChunkPiece> pieces, StreamMask used_by);
  bool idle(std::uint32_t chunk) const { return chunks_[chunk].live.empty(); }
  // No live tenant overlaps the piece.
  bool available(const ChunkPiece& piece) const;
  std::size_t idle_count() const { return idle_count_; }

 private:
  struct Interval {
    std::uint32_t lo = 0;
    std::uint32_t hi = 0;
  };
  struct PoolChunk {
    Chunk chunk;
    std::vector<Interval> live;
  };
  PhysicalMemory& memory_;
  std::vector<PoolChunk> chunks_;
  std::size_t idle_count_ = 0;
};

}  // namespace stalloc
