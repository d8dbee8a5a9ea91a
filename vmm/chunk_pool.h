// A fixed set of physical chunks created up front (cuMemCreate is far too slow for the allocation
// path), handed out by index. A plan names chunks by index, so the pool never creates or
// releases a chunk after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "vmm/driver.h"
#include "vmm/physical_chunk.h"

namespace stalloc::vmm {

class ChunkPool {
 public:
  // Creates chunk_count chunks of chunk_size bytes (0: the driver's granularity). Throws
  // VmmError when the driver refuses one, after releasing those already made.
  ChunkPool(Driver& driver, std::size_t chunk_count, std::size_t chunk_size = 0);

  // A free chunk's index: 0, 1, 2, ... at first, then the most recently released first;
  // nullopt when all are in use.
  std::optional<std::uint32_t> acquire();
  // Gives a chunk back. Throws UsageError for an index out of range or not in use.
  void release(std::uint32_t index);
  // Throws UsageError for an index out of range.
  ChunkHandle handle(std::uint32_t index) const;

  std::size_t chunk_size() const { return chunk_size_; }
  std::size_t created() const { return chunks_.size(); }
  std::size_t in_use() const;
  std::size_t peak_in_use() const;

 private:
  std::size_t chunk_size_ = 0;
  std::vector<PhysicalChunk> chunks_;

  mutable std::mutex mu_;
  std::vector<std::uint32_t> free_;  // a stack: the lowest index on top
  std::vector<bool> in_use_flags_;
  std::size_t in_use_ = 0;
  std::size_t peak_in_use_ = 0;
};

}  // namespace stalloc::vmm
