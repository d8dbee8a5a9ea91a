#include "src/slab.h"

#include <algorithm>
#include <bit>

namespace stalloc {

Slab::Slab(vmm::Driver& driver, PhysicalMemory& memory, StreamSync& sync,
           std::uint64_t small_size)
    : driver_(driver), memory_(memory), sync_(sync), granularity_(memory.granularity()) {
  // Classes stop at half a chunk: a class as large as a chunk is the dynamic path already.
  max_block_ = 0;
  if (small_size >= kMinBlock) {
    max_block_ = std::min(std::bit_ceil(small_size), granularity_ / 2);
  }
  for (std::uint64_t b = kMinBlock; b <= max_block_; b *= 2) classes_.push_back(SizeClass{b, SIZE_MAX, 0, {}});
  if (classes_.empty()) max_block_ = 0;
}

Slab::~Slab() {
  for (SlabChunk& c : chunks_) {
    driver_.unmap(c.base, granularity_);
    driver_.free_reservation(c.base, granularity_);
    memory_.give_back(c.chunk);
  }
}

std::uint32_t Slab::class_of(std::uint64_t size) const {
  std::uint64_t block = std::bit_ceil(std::max(size, kMinBlock));
  return static_cast<std::uint32_t>(std::countr_zero(block) - std::countr_zero(kMinBlock));
}

bool Slab::add_chunk(std::uint32_t size_class, std::string* why) {
  auto c = memory_.acquire();
  if (!c) {
    *why = memory_.last_failure();
    return false;
  }
  vmm::DevicePtr base = 0;
  if (driver_.reserve(&base, granularity_) != vmm::Status::Success) {
    *why = "cuMemAddressReserve failed for a slab chunk";
    memory_.give_back(*c);
    return false;
  }
  if (driver_.map(base, granularity_, 0, c->handle) != vmm::Status::Success) {
    *why = "mapping a slab chunk failed (live mappings limit?)";
    driver_.free_reservation(base, granularity_);
    memory_.give_back(*c);
    return false;
  }
  if (driver_.set_access(base, granularity_, vmm::Access::ReadWrite) != vmm::Status::Success) {
    *why = "cuMemSetAccess failed for a slab chunk";
    driver_.unmap(base, granularity_);
    driver_.free_reservation(base, granularity_);
    memory_.give_back(*c);
    return false;
  }
  chunk_index_.emplace(base, chunks_.size());
  chunks_.push_back(SlabChunk{base, {c->handle, 0}, size_class, c->users});
  classes_[size_class].current = chunks_.size() - 1;
  classes_[size_class].carved = 0;
  return true;
}

vmm::DevicePtr Slab::allocate(std::uint64_t size, std::uint32_t stream, std::string* why) {
  SizeClass& sc = classes_[class_of(size)];
  vmm::DevicePtr ptr = 0;
  StreamMask users = 0;
  if (stream < sc.free_by_stream.size() && !sc.free_by_stream[stream].empty()) {
    ptr = sc.free_by_stream[stream].back().ptr;
    users = sc.free_by_stream[stream].back().users;
    sc.free_by_stream[stream].pop_back();
  } else {
    if (sc.current == SIZE_MAX || sc.carved + sc.block > granularity_) {
      // Blocks freed on other streams before a new chunk: reuse waits on the GPU, not the host.
      for (auto& list : sc.free_by_stream) {
        if (list.empty()) continue;
        ptr = list.back().ptr;
        users = list.back().users;
        list.pop_back();
        break;
      }
      if (ptr == 0 && !add_chunk(class_of(size), why)) return 0;
    }
    if (ptr == 0) {
      const SlabChunk& c = chunks_[sc.current];
      ptr = c.base + sc.carved;
      users = c.inherited;
      sc.carved += sc.block;
    }
  }
  if (!sync_.order_after(users, stream)) {
    *why = "stream ordering failed for a slab block";
    if (stream >= sc.free_by_stream.size()) sc.free_by_stream.resize(stream + 1);
    sc.free_by_stream[stream].push_back({ptr, users});
    return 0;
  }
  live_.emplace(ptr, size);
  live_bytes_ += size;
  return ptr;
}

bool Slab::owns(vmm::DevicePtr ptr) const {
  return chunk_index_.count(ptr & ~(granularity_ - 1)) != 0;
}

bool Slab::free(vmm::DevicePtr ptr, std::uint32_t stream, StreamMask used_by) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  live_bytes_ -= it->second;
  live_.erase(it);
  SizeClass& sc = classes_[chunks_[chunk_index_.at(ptr & ~(granularity_ - 1))].size_class];
  if (stream >= sc.free_by_stream.size()) sc.free_by_stream.resize(stream + 1);
  sc.free_by_stream[stream].push_back({ptr, used_by});
  return true;
}

std::vector<Slab::ChunkView> Slab::chunk_views() const {
  std::vector<ChunkView> views;
  for (const SlabChunk& c : chunks_) views.push_back({c.base, classes_[c.size_class].block, {}});
  for (const auto& [ptr, size] : live_) {
    views[chunk_index_.at(ptr & ~(granularity_ - 1))].live.emplace_back(ptr, size);
  }
  return views;
}

}  // namespace stalloc
