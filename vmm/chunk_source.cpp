#include "vmm/chunk_source.h"

#include <string>

#include "common/error.h"
#include "vmm/vmm_error.h"

namespace stalloc::vmm {

PoolChunkSource::PoolChunkSource(ChunkPool& pool) : pool_(pool) {
  for (std::uint32_t i = 0; i < pool.created(); ++i) index_of_.emplace(pool.handle(i), i);
}

Status PoolChunkSource::acquire(ChunkHandle* out) {
  const auto index = pool_.acquire();
  if (!index) return Status::OutOfMemory;
  *out = pool_.handle(*index);
  return Status::Success;
}

void PoolChunkSource::release(ChunkHandle chunk) {
  const auto it = index_of_.find(chunk);
  if (it == index_of_.end()) {
    throw UsageError("pool chunk source: chunk handle " + std::to_string(chunk) +
                     " does not belong to the pool");
  }
  pool_.release(it->second);
}

FreshChunkSource::FreshChunkSource(Driver& driver, std::size_t chunk_size)
    : driver_(driver), chunk_size_(chunk_size) {
  if (chunk_size_ == 0) {
    const Status s = driver.granularity(&chunk_size_);
    if (s != Status::Success) throw VmmError("fresh chunk source: granularity", s);
  }
}

}  // namespace stalloc::vmm
