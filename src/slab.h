// Small requests the plan does not cover. On the dynamic path every request takes whole chunks,
// so a small tensor would hold a full chunk; the slab packs them instead: power-of-two size
// classes from 512 B up to small_size, each carved from its own chunks (one reservation and one
// mapping per chunk, kept for the slab's life). Free blocks are reused on the stream that freed
// them first; a block reused by another stream waits for its old users.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/physical_memory.h"
#include "src/stream_sync.h"
#include "vmm/driver.h"

namespace stalloc {

class Slab {
 public:
  static constexpr std::uint64_t kMinBlock = 512;

  Slab(vmm::Driver& driver, PhysicalMemory& memory, StreamSync& sync, std::uint64_t small_size);
  ~Slab();
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;

  bool serves(std::uint64_t size) const { return !classes_.empty() && size <= max_block_; }
  // 0 when no chunk can be had (*why says why).
  vmm::DevicePtr allocate(std::uint64_t size, std::uint32_t stream, std::string* why);
  bool owns(vmm::DevicePtr ptr) const;
  // False when ptr is not a live slab block.
  bool free(vmm::DevicePtr ptr, std::uint32_t stream, StreamMask used_by);

  std::uint64_t live_bytes() const { return live_bytes_; }
  std::uint64_t reserved_bytes() const { return chunks_.size() * granularity_; }

  struct ChunkView {
    vmm::DevicePtr base = 0;
    std::uint64_t block = 0;
    std::vector<std::pair<vmm::DevicePtr, std::uint64_t>> live;  // address, requested size
  };
  std::vector<ChunkView> chunk_views() const;

 private:
  struct FreeBlock {
    vmm::DevicePtr ptr = 0;
    StreamMask users = 0;
  };
  struct SlabChunk {
    vmm::DevicePtr base = 0;
    Chunk chunk;
    std::uint32_t size_class = 0;
    StreamMask inherited = 0;  // users of the chunk before the slab took it
  };
  struct SizeClass {
    std::uint64_t block = 0;
    std::size_t current = SIZE_MAX;  // chunk being carved, index in chunks_
    std::uint64_t carved = 0;        // bytes carved from it
    std::vector<std::vector<FreeBlock>> free_by_stream;
  };
  std::uint32_t class_of(std::uint64_t size) const;
  bool add_chunk(std::uint32_t size_class, std::string* why);

  vmm::Driver& driver_;
  PhysicalMemory& memory_;
  StreamSync& sync_;
  std::uint64_t granularity_;
  std::uint64_t max_block_;
  std::vector<SizeClass> classes_;
  std::vector<SlabChunk> chunks_;
  std::unordered_map<vmm::DevicePtr, std::size_t> chunk_index_;  // base -> chunks_ index
  std::unordered_map<vmm::DevicePtr, std::uint64_t> live_;       // block -> requested size
  std::uint64_t live_bytes_ = 0;
};

}  // namespace stalloc
