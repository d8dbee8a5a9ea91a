// Requests matched to a Dynamic slot (varying_sizes:dynamic: tensors whose size varies). Each
// request gets its own virtual range backed chunk by chunk, like an expandable segment: from the
// slot's budget chunks (chunks the plan leaves idle over its lifetime) while they are idle, else
// from the physical-memory cache or fresh chunks. Requests no plan covers go to the packed
// arenas (packed_arena.h). At free the chunks
// go back at once (a chunk may be mapped at two addresses, and stream order protects a reuse);
// the old range is unmapped lazily, once events show the GPU is done with it.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/physical_memory.h"
#include "src/plan_pool.h"
#include "src/stream_sync.h"
#include "vmm/driver.h"

namespace stalloc {

class DynamicArena {
 public:
  DynamicArena(vmm::Driver& driver, PhysicalMemory& memory, PlanPool& pool, StreamSync& sync);
  ~DynamicArena();
  DynamicArena(const DynamicArena&) = delete;
  DynamicArena& operator=(const DynamicArena&) = delete;

  // 0 when memory runs out (*why says why). budget: pool chunks it may borrow.
  vmm::DevicePtr allocate(std::uint64_t size, std::uint32_t stream,
                          const std::vector<std::uint32_t>& budget, std::string* why);
  // False when ptr is not a live dynamic allocation.
  bool free(vmm::DevicePtr ptr, StreamMask used_by);
  bool owns(vmm::DevicePtr ptr) const { return live_.count(ptr) != 0; }
  // Unmaps retired ranges whose events completed.
  void poll();

  std::uint64_t live_bytes() const { return live_bytes_; }

  struct LiveRange {
    vmm::DevicePtr base = 0;
    std::uint64_t size = 0;    // requested
    std::uint64_t bytes = 0;   // mapped
  };
  std::vector<LiveRange> live_ranges() const;

 private:
  struct Backing {
    bool pooled = false;
    std::uint32_t pool_chunk = 0;
    Chunk chunk;
  };
  struct Range {
    std::uint64_t size = 0;
    std::uint64_t bytes = 0;
    std::vector<Backing> backing;
  };
  struct Retiring {
    vmm::DevicePtr base = 0;
    std::uint64_t bytes = 0;
    std::vector<vmm::EventHandle> events;
  };
  void unmap_range(vmm::DevicePtr base, std::uint64_t bytes, std::size_t mapped);
  void return_backing(Backing& b, StreamMask used_by);

  vmm::Driver& driver_;
  PhysicalMemory& memory_;
  PlanPool& pool_;
  StreamSync& sync_;
  std::uint64_t granularity_;
  std::unordered_map<vmm::DevicePtr, Range> live_;
  std::deque<Retiring> retiring_;
  std::vector<Retiring> unretired_;
  std::uint64_t live_bytes_ = 0;
};

}  // namespace stalloc
