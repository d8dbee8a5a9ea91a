// Where an ExpandableRange gets its chunks: from the chunks a plan leaves idle (a ChunkPool) or
// fresh from the driver. Sources are thread-safe when what they draw from is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "vmm/chunk_pool.h"
#include "vmm/driver.h"

namespace stalloc::vmm {

class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  // Size of every chunk this source gives.
  virtual std::size_t chunk_size() const = 0;
  // A chunk for the caller's use; OutOfMemory when none can be had.
  virtual Status acquire(ChunkHandle* out) = 0;
  // Gives back a chunk acquired from this source.
  virtual void release(ChunkHandle chunk) = 0;
};

// Lends a pool's free chunks.
class PoolChunkSource final : public ChunkSource {
 public:
  explicit PoolChunkSource(ChunkPool& pool);
  std::size_t chunk_size() const override { return pool_.chunk_size(); }
  Status acquire(ChunkHandle* out) override;
  // Throws UsageError for a chunk that is not the pool's.
  void release(ChunkHandle chunk) override;

 private:
  ChunkPool& pool_;
  std::unordered_map<ChunkHandle, std::uint32_t> index_of_;  // fixed after construction
};

// Creates a chunk per acquire and releases it on release (cuMemCreate on demand).
class FreshChunkSource final : public ChunkSource {
 public:
  // chunk_size 0: the driver's granularity.
  explicit FreshChunkSource(Driver& driver, std::size_t chunk_size = 0);
  std::size_t chunk_size() const override { return chunk_size_; }
  Status acquire(ChunkHandle* out) override { return driver_.create(out, chunk_size_); }
  void release(ChunkHandle chunk) override { driver_.release(chunk); }

 private:
  Driver& driver_;
  std::size_t chunk_size_;
};

}  // namespace stalloc::vmm
