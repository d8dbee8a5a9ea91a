// A large virtual range whose front part is backed by chunks, grown and shrunk at its end, for
// tensors whose size is only known at run time (MoE expert buffers). Growing maps each new chunk
// with its own map call (an unmap must match one map call, so shrinking stays possible chunk by
// chunk) and grants access once over the new part (set_access is the expensive call). The data
// in the part that stays mapped is kept. An operation that fails half way undoes itself.
//
// Not thread-safe: one owner at a time (the runtime holds its lock around it).
#pragma once

#include <cstddef>
#include <vector>

#include "vmm/chunk_source.h"
#include "vmm/driver.h"
#include "vmm/mapping.h"
#include "vmm/va_reservation.h"

namespace stalloc::vmm {

class ExpandableRange {
 public:
  // Reserves reserve_bytes (a multiple of the granularity). Throws VmmError when the driver
  // refuses.
  ExpandableRange(Driver& driver, std::size_t reserve_bytes);
  ~ExpandableRange();
  ExpandableRange(const ExpandableRange&) = delete;
  ExpandableRange& operator=(const ExpandableRange&) = delete;

  // Backs `bytes` more (a multiple of source.chunk_size()) with chunks from source.
  // InvalidValue for a size that is not whole chunks, OutOfMemory past the reservation or when
  // the source or the driver runs out; on failure the range is as before.
  Status grow(std::size_t bytes, ChunkSource& source);
  // Unmaps the last `bytes` and gives their chunks back to the sources they came from.
  // InvalidValue unless bytes covers whole chunks.
  Status shrink(std::size_t bytes);

  DevicePtr base() const { return reservation_.base(); }
  std::size_t reserved_bytes() const { return reservation_.size(); }
  std::size_t mapped_bytes() const { return mapped_bytes_; }
  std::size_t chunk_count() const { return pieces_.size(); }

 private:
  struct Piece {
    Mapping mapping;
    ChunkHandle chunk;
    ChunkSource* source;
  };

  // Unmaps and returns the chunks of pieces_[first..end).
  void drop_pieces_from(std::size_t first);

  Driver& driver_;
  VaReservation reservation_;
  std::vector<Piece> pieces_;
  std::size_t mapped_bytes_ = 0;
};

}  // namespace stalloc::vmm
