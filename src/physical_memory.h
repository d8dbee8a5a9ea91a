// The runtime's physical chunks: every chunk it holds (the plan pool, the packed arenas' own
// pages) is created here, so reserved memory and the capacity are accounted in one place.
// Chunks given back by the packed arenas stay cached for reuse (cuMemCreate is slow) until
// empty_cache() or a plan install trims them. A chunk remembers the streams that used it, for
// stream ordering.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/stream_sync.h"
#include "vmm/driver.h"

namespace stalloc {

struct Chunk {
  vmm::ChunkHandle handle = 0;
  StreamMask users = 0;  // streams whose work on this chunk may still be in flight
};

class PhysicalMemory {
 public:
  // capacity 0: unlimited.
  PhysicalMemory(vmm::Driver& driver, std::uint64_t granularity, std::uint64_t capacity);
  ~PhysicalMemory();
  PhysicalMemory(const PhysicalMemory&) = delete;
  PhysicalMemory& operator=(const PhysicalMemory&) = delete;

  std::uint64_t granularity() const { return granularity_; }

  // A cached chunk, else a new one within the capacity; nullopt (and last_failure()) otherwise.
  std::optional<Chunk> acquire();
  // A cached chunk only: nullopt when the cache is empty.
  std::optional<Chunk> take_cached();
  // Back to the cache.
  void give_back(Chunk chunk);
  // A chunk of `granules` times the granularity for one tensor's own range (DedicatedRanges),
  // within the capacity; never cached here. nullopt (and last_failure()) when it cannot be had.
  std::optional<Chunk> acquire_dedicated(std::uint64_t granules);
  void release_dedicated(const Chunk& chunk, std::uint64_t granules);
  // Releases every cached chunk to the driver.
  void trim();
  // True when `count` chunks, cached ones first, can be had within the capacity.
  bool can_hold(std::uint64_t count) const;

  std::uint64_t reserved_bytes() const { return held_ * granularity_; }
  std::uint64_t peak_reserved_bytes() const { return peak_held_ * granularity_; }
  std::uint64_t cached_bytes() const { return cache_.size() * granularity_; }
  std::uint64_t capacity() const { return capacity_; }
  void set_capacity(std::uint64_t capacity) { capacity_ = capacity; }
  void reset_peak() { peak_held_ = held_; }
  // The most ever held, never reset: what holding more than now costs nothing below.
  std::uint64_t high_water_bytes() const { return high_water_ * granularity_; }
  const std::string& last_failure() const { return last_failure_; }

 private:
  vmm::Driver& driver_;
  std::uint64_t granularity_;
  std::uint64_t capacity_;
  std::uint64_t held_ = 0;  // granules created and not released, cached chunks included
  std::uint64_t peak_held_ = 0;
  std::uint64_t high_water_ = 0;
  std::vector<Chunk> cache_;
  std::string last_failure_;
};

}  // namespace stalloc
