#include "vmm/expandable_range.h"

#include <string>

#include "vmm/vmm_error.h"

namespace stalloc::vmm {

ExpandableRange::ExpandableRange(Driver& driver, std::size_t reserve_bytes) : driver_(driver) {
  const Status s = VaReservation::reserve(driver, reserve_bytes, 0, &reservation_);
  if (s != Status::Success) {
    throw VmmError("expandable range: reserving " + std::to_string(reserve_bytes) + " bytes", s);
  }
}

ExpandableRange::~ExpandableRange() { drop_pieces_from(0); }

Status ExpandableRange::grow(std::size_t bytes, ChunkSource& source) {
  const std::size_t chunk = source.chunk_size();
  if (chunk == 0 || bytes % chunk != 0) return Status::InvalidValue;
  if (bytes > reserved_bytes() - mapped_bytes_) return Status::OutOfMemory;
  const std::size_t first_new = pieces_.size();
  const DevicePtr start = base() + mapped_bytes_;
  for (std::size_t done = 0; done < bytes; done += chunk) {
    ChunkHandle handle = 0;
    Status s = source.acquire(&handle);
    if (s != Status::Success) {
      drop_pieces_from(first_new);
      return s;
    }
    Mapping mapping;
    s = Mapping::map(driver_, start + done, chunk, 0, handle, &mapping);
    if (s != Status::Success) {
      source.release(handle);
      drop_pieces_from(first_new);
      return s;
    }
    pieces_.push_back(Piece{std::move(mapping), handle, &source});
  }
  if (bytes == 0) return Status::Success;
  const Status s = driver_.set_access(start, bytes, Access::ReadWrite);
  if (s != Status::Success) {
    drop_pieces_from(first_new);
    return s;
  }
  mapped_bytes_ += bytes;
  return Status::Success;
}

Status ExpandableRange::shrink(std::size_t bytes) {
  std::size_t covered = 0;
  std::size_t first = pieces_.size();
  while (covered < bytes && first > 0) covered += pieces_[--first].mapping.size();
  if (covered != bytes) return Status::InvalidValue;
  drop_pieces_from(first);
  mapped_bytes_ -= bytes;
  return Status::Success;
}

void ExpandableRange::drop_pieces_from(std::size_t first) {
  while (pieces_.size() > first) {
    Piece& piece = pieces_.back();
    piece.mapping.reset();
    piece.source->release(piece.chunk);
    pieces_.pop_back();
  }
}

}  // namespace stalloc::vmm
