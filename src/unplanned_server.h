// Everything that serves the requests no planned slot takes: per stream, packed arenas (small
// requests apart from large ones once much is held; before the first plan, large requests on
// pages of online_page bytes when set), the dedicated ranges (a large tensor on a chunk of its
// own while no plan is followed), and the lender that lets the arenas borrow the plan pool's
// idle chunks before creating any. Each live block remembers the SubAllocator that served it.
//
// Under pressure the runtime's Reclaimer asks it for idle memory (release_idle,
// give_idle_pages); it never decides on its own what else to give back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "src/dedicated_ranges.h"
#include "src/idle_chunk_lender.h"
#include "src/memory_snapshot.h"
#include "src/packed_arena.h"
#include "src/physical_memory.h"
#include "src/plan_pool.h"
#include "src/reclaimer.h"
#include "src/runtime_config.h"
#include "src/stream_sync.h"
#include "src/sub_allocator.h"
#include "vmm/driver.h"

namespace stalloc {

class UnplannedServer {
 public:
  // device_bytes: the device's memory where the driver keeps to it, else 0 (it bounds the
  // address space each stream's arenas reserve).
  UnplannedServer(const RuntimeConfig& config, std::uint64_t granularity, vmm::Driver& driver,
                  PhysicalMemory& memory, PlanPool& pool, StreamSync& sync, Reclaimer& reclaimer,
                  std::uint64_t device_bytes);

  // What serves a request of `size` on `stream`: a dedicated range while no plan is followed
  // and the tensor is large (RuntimePolicy::dedicated_waste_share), else the stream's packed
  // arena for its size (`planned`: some plan is installed, so no online pages).
  SubAllocator& choose(std::uint64_t size, std::uint32_t stream, bool following, bool planned);

  struct Block {
    std::uint64_t id = 0;
    std::uint64_t size = 0;
    std::uint32_t stream = 0;
    StreamMask used_by = 0;
    SubAllocator* by = nullptr;  // never null: what served it
  };
  void add(vmm::DevicePtr address, Block block) { live_.emplace(address, block); }
  // Frees the block at `address` where it was served (*done: whether that took it back);
  // nothing when it is none of these.
  std::optional<Block> free(vmm::DevicePtr address, bool* done);
  bool holds(vmm::DevicePtr address) const { return live_.count(address) != 0; }
  // Adds `stream` to the users of a live block; false when `address` is none.
  bool record_stream(vmm::DevicePtr address, StreamMask stream);

  IdleChunkLender& lender() { return lender_; }
  const IdleChunkLender& lender() const { return lender_; }
  DedicatedRanges& dedicated() { return dedicated_; }
  const DedicatedRanges& dedicated() const { return dedicated_; }

  // Unmaps the arenas' emptied pages the GPU is done with.
  void poll();
  // Retires every idle page and cached range; returns how many.
  std::uint64_t release_idle();
  // Idle arena pages the GPU is done with, the oldest first, until `bytes` are given back or
  // none is left (PackedArena::give_idle_chunk); returns the bytes given.
  std::uint64_t give_idle_pages(std::uint64_t bytes);
  // An arena other than `asking` puts one idle page into PhysicalMemory's cache; true if one did.
  bool give_idle_page_to(const PackedArena* asking);
  // What the arenas' emptied pages hold (PackedArena::emptied_bytes), together.
  std::uint64_t emptied_bytes() const;
  bool unmaps_pending() const;
  // Memory holding live tensors: the pages and ranges that stay beside a plan's pool.
  std::uint64_t held_beside_plans() const;
  // Requested bytes live in the arenas.
  std::uint64_t packed_live_bytes() const;
  // The arenas' runs as snapshot segments (stream handles from sync).
  void append_segments(const StreamSync& sync, std::vector<SnapshotSegment>* segments) const;

 private:
  PackedArena& arena(std::uint32_t stream, std::uint64_t size, bool planned);
  // Address space for a new arena: the policy's, or arena_limit_share times the memory the
  // runtime may hold (capacity, else the device) where that is less, at least 1 GiB. A stream
  // cannot hold more than that, and a GPU's 47 to 49 bits would otherwise run out at about a
  // hundred streams.
  std::uint64_t reservation(std::uint64_t policy_bytes) const;

  const RuntimeConfig& config_;
  const std::uint64_t granularity_;
  vmm::Driver& driver_;
  PhysicalMemory& memory_;
  StreamSync& sync_;
  Reclaimer& reclaimer_;
  const std::uint64_t device_bytes_;
  IdleChunkLender lender_;
  DedicatedRanges dedicated_;  // large unplanned tensors while no plan is followed
  // Per stream, kArenaKinds arenas (small requests, large ones, large ones on online pages).
  std::vector<std::unique_ptr<PackedArena>> packed_;
  std::unordered_map<vmm::DevicePtr, Block> live_;
};

}  // namespace stalloc
