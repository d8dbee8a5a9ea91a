// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), precise enough
// that the memory it reserves for a trace is what PyTorch would reserve. It keeps PyTorch's
// policy, not its code: requests rounded to 512 B (or power-of-two divisions), a small pool
// (<= 1 MiB, 2 MiB segments) and a large pool (20 MiB segments for 1-10 MiB, 2 MiB-rounded ones
// above), best fit by (stream, size, address), splitting and coalescing within a segment,
// max_split_size_mb, garbage_collection_threshold, and on a failed segment allocation the two
// retries (release oversize cached blocks, then every unsplit cached block).
//
// With expandable_segments:True every (stream, pool) gets one large reserved address range that
// grows by mapping pages (2 MiB small pool, 20 MiB large pool) and, on a retry, unmaps the whole
// pages inside free blocks, as PyTorch's ExpandableSegment does.
//
// GmlakeModel derives from this class: it reuses the pools and adds stitching.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/allocator_model.h"
#include "sim/pytorch_alloc_conf.h"

namespace stalloc {

class PytorchCachingModel : public AllocatorModel {
 public:
  static constexpr std::uint64_t kMinBlockSize = 512;
  static constexpr std::uint64_t kSmallSize = 1ull << 20;
  static constexpr std::uint64_t kSmallBuffer = 2ull << 20;
  static constexpr std::uint64_t kLargeBuffer = 20ull << 20;
  static constexpr std::uint64_t kMinLargeAlloc = 10ull << 20;
  static constexpr std::uint64_t kRoundLarge = 2ull << 20;

  PytorchCachingModel(std::string name, const PytorchAllocConf& conf, std::uint64_t capacity);
  ~PytorchCachingModel() override;
  PytorchCachingModel(const PytorchCachingModel&) = delete;
  PytorchCachingModel& operator=(const PytorchCachingModel&) = delete;

  std::string_view name() const override { return name_; }
  bool allocate(const Event& e, std::uint64_t* address) override;
  void deallocate(const Event& e) override;
  std::uint64_t reserved_bytes() const override { return reserved_; }
  vmm::CallTally driver_calls() const override { return calls_; }

  // PyTorch's size policy, exposed for tests.
  std::uint64_t round_size(std::uint64_t size) const;
  static std::uint64_t allocation_size(std::uint64_t rounded);
  // Segments (cudaMalloc'ed or expandable) currently held.
  std::size_t segment_count() const { return segments_.size(); }
  // Free (cached) blocks in both pools.
  std::size_t free_block_count() const { return free_[0].size() + free_[1].size(); }
  const PytorchAllocConf& conf() const { return conf_; }

 protected:
  struct Segment {
    std::uint64_t base = 0;
    std::uint64_t size = 0;  // address space; physical bytes for a non-expandable segment
    bool expandable = false;
    bool small = false;
  };
  struct Block {
    std::uint64_t addr = 0;
    std::uint64_t size = 0;
    std::uint32_t stream = 0;
    bool small = false;
    bool allocated = false;
    bool mapped = true;  // false: expandable address space without pages
    Segment* segment = nullptr;
    Block* prev = nullptr;  // neighbours inside the segment, in address order
    Block* next = nullptr;
    std::uint64_t gc_base = 0;  // pool search count when the block became free
  };
  struct BySize {  // PyTorch's BlockComparator: stream, then size, then address
    bool operator()(const Block* a, const Block* b) const;
  };
  struct ByAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BySize>;

  // Rounds a request to the size the pools serve (GMLake rounds large ones to whole chunks).
  virtual std::uint64_t pool_size(std::uint64_t requested) const { return round_size(requested); }
  // A miss in the free pool before a new segment is made: a subclass may serve the request from
  // what is cached (GMLake stitches). Returns true and sets *address when it did.
  virtual bool serve_from_cache(const Event& e, std::uint64_t size, std::uint64_t* address);
  // Frees an allocation this class did not record as a block; false if it does not know it.
  virtual bool release_other(const Event& e);
  // Counts the driver calls that create / destroy a non-expandable segment of `bytes`
  // (cudaMalloc / cudaFree here).
  virtual void count_segment_create(std::uint64_t bytes, bool small);
  virtual void count_segment_release(std::uint64_t bytes, bool small);

  FreeSet& free_pool(bool small) { return free_[small ? 1 : 0]; }
  // Takes a free block out of its pool and marks it allocated.
  void take(Block* b);
  // Marks an allocated block free, merges it with free neighbours, returns it to its pool.
  void free_block(Block* b);
  // Splits b so that it keeps `size` bytes; the rest becomes a free block in b's pool.
  void split(Block* b, std::uint64_t size);
  std::uint64_t new_address_range(std::uint64_t bytes);
  void add_calls(vmm::CallKind kind, std::uint64_t n = 1) { calls_[kind] += n; }

 private:
  Block* new_block();
  void delete_block(Block* b);
  Block* get_free_block(std::uint32_t stream, bool small, std::uint64_t size);
  Block* alloc_block(std::uint32_t stream, bool small, std::uint64_t size, std::uint64_t alloc_size);
  Block* alloc_segment(std::uint32_t stream, bool small, std::uint64_t alloc_size);
  Block* alloc_expandable(std::uint32_t stream, bool small, std::uint64_t size);
  Block* find_expandable_block(std::uint32_t stream, bool small, std::uint64_t size);
  bool map_block(Block* b, std::uint64_t size);
  void unmap_block(Block* b);
  bool should_split(const Block* b, std::uint64_t size) const;
  void try_merge(Block* dst, Block* src);
  void release_block(Block* b);
  void release_expandable_segment(Block* b);
  bool release_available_cached_blocks(std::uint32_t stream, bool small, std::uint64_t size);
  bool release_cached_blocks();
  void garbage_collect();
  std::uint64_t page_size(bool small) const { return small ? kSmallBuffer : kLargeBuffer; }

  std::string name_;
  PytorchAllocConf conf_;
  std::uint64_t capacity_;
  std::uint64_t expandable_range_;  // address space of one expandable segment
  std::uint64_t reserved_ = 0;
  vmm::CallTally calls_;
  std::uint64_t next_address_ = 1ull << 32;
  FreeSet free_[2];                        // [0] large pool, [1] small pool
  std::set<Block*, ByAddress> unmapped_[2];
  std::uint64_t free_searches_[2] = {0, 0};  // garbage collection ages blocks by pool searches
  std::map<std::uint64_t, std::unique_ptr<Segment>> segments_;  // by base address
  std::unordered_map<std::uint64_t, Block*> live_;              // allocation id -> block
  std::vector<std::unique_ptr<Block>> block_storage_;
  std::vector<Block*> spare_blocks_;
};

}  // namespace stalloc
