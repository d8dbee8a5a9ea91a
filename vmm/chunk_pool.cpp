#include "vmm/chunk_pool.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/error.h"
#include "vmm/vmm_error.h"

namespace stalloc::vmm {

ChunkPool::ChunkPool(Driver& driver, std::size_t chunk_count, std::size_t chunk_size)
    : chunk_size_(chunk_size) {
  if (chunk_count > std::numeric_limits<std::uint32_t>::max()) {
    throw UsageError("chunk pool: " + std::to_string(chunk_count) + " chunks is more than 2^32-1");
  }
  if (chunk_size_ == 0) {
    const Status s = driver.granularity(&chunk_size_);
    if (s != Status::Success) throw VmmError("chunk pool: granularity", s);
  }
  chunks_.reserve(chunk_count);
  for (std::size_t i = 0; i < chunk_count; ++i) {
    PhysicalChunk chunk;
    const Status s = PhysicalChunk::create(driver, chunk_size_, &chunk);
    // chunks_ releases the ones already made as the exception unwinds.
    if (s != Status::Success) {
      throw VmmError("chunk pool: creating chunk " + std::to_string(i) + " of " +
                         std::to_string(chunk_count),
                     s);
    }
    chunks_.push_back(std::move(chunk));
  }
  free_.resize(chunk_count);
  for (std::size_t i = 0; i < chunk_count; ++i) {
    free_[i] = static_cast<std::uint32_t>(chunk_count - 1 - i);
  }
  in_use_flags_.assign(chunk_count, false);
}

std::optional<std::uint32_t> ChunkPool::acquire() {
  std::lock_guard lock(mu_);
  if (free_.empty()) return std::nullopt;
  const std::uint32_t index = free_.back();
  free_.pop_back();
  in_use_flags_[index] = true;
  peak_in_use_ = std::max(peak_in_use_, ++in_use_);
  return index;
}

void ChunkPool::release(std::uint32_t index) {
  std::lock_guard lock(mu_);
  if (index >= in_use_flags_.size() || !in_use_flags_[index]) {
    throw UsageError("chunk pool: release of chunk " + std::to_string(index) +
                     ", which is not in use");
  }
  in_use_flags_[index] = false;
  --in_use_;
  free_.push_back(index);
}

ChunkHandle ChunkPool::handle(std::uint32_t index) const {
  if (index >= chunks_.size()) {
    throw UsageError("chunk pool: chunk " + std::to_string(index) + " out of range (pool of " +
                     std::to_string(chunks_.size()) + ")");
  }
  return chunks_[index].handle();
}

std::size_t ChunkPool::in_use() const {
  std::lock_guard lock(mu_);
  return in_use_;
}

std::size_t ChunkPool::peak_in_use() const {
  std::lock_guard lock(mu_);
  return peak_in_use_;
}

}  // namespace stalloc::vmm
