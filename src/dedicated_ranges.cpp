#include "src/dedicated_ranges.h"

#include <algorithm>
#include <optional>

#include "common/units.h"

namespace stalloc {

namespace {
// A miss the GPU leaves nothing to release for takes a cached range at most 1/kLargerShare
// larger than it needs whole, or shares one at most kSharedAtMost times its size
// (dedicated_ranges.h; both measured under lag, docs/decisions.md, "Dedicated ranges while the GPU runs behind").
constexpr std::uint64_t kLargerShare = 8;
constexpr std::uint64_t kSharedAtMost = 2;
// The most cached ranges a stitch maps together: each is a cuMemMap (and a cuMemUnmap later).
constexpr std::size_t kStitchParts = 8;
// Freed stitches kept mapped for the next request of their size (each holds up to
// kStitchParts mappings); the oldest beyond this are unmapped.
constexpr std::size_t kCachedStitches = 64;
}  // namespace

DedicatedRanges::DedicatedRanges(vmm::Driver& driver, PhysicalMemory& memory, StreamSync& sync,
                                 Reclaimer& reclaimer)
    : driver_(driver),
      memory_(memory),
      sync_(sync),
      markers_(sync),
      reclaimer_(reclaimer),
      granularity_(memory.granularity()) {}

DedicatedRanges::~DedicatedRanges() {
  // Stitched mappings first: their parts' chunks are released below.
  while (!stitches_cached_.empty()) unmap_stitch(stitches_cached_.begin());
  for (auto& [address, st] : stitched_) {
    std::uint64_t offset = 0;
    for (Range& part : st.parts) {
      driver_.unmap(address + offset, part.bytes);
      offset += part.bytes;
    }
    driver_.free_reservation(address, st.bytes);
    for (Range& part : st.parts) destroy(part);
  }
  for (Range& r : cached_) {
    markers_.release(r.marker);
    destroy(r);
  }
  for (auto& [address, r] : live_) destroy(r);
  for (Shared& s : shared_) destroy(s.range);
}

void DedicatedRanges::destroy(Range& r) {
  driver_.unmap(r.address, r.bytes);
  driver_.free_reservation(r.address, r.bytes);
  memory_.release_dedicated(r.chunk, r.bytes / granularity_);
}

bool DedicatedRanges::gpu_done(std::uint32_t marker, StreamMask users) {
  return marker == FreeMarkers::kNone ? users == 0 : markers_.done(marker);
}

std::uint64_t DedicatedRanges::release_for(std::uint64_t bytes) {
  std::uint64_t released = 0;
  for (auto it = cached_.begin(); it != cached_.end() && released < bytes;) {
    if (!gpu_done(*it) || !unstitch(it->chunk.handle)) {
      ++it;
      continue;
    }
    released += it->bytes;
    cached_bytes_ -= it->bytes;
    markers_.release(it->marker);
    destroy(*it);
    it = cached_.erase(it);
  }
  return released;
}

vmm::DevicePtr DedicatedRanges::allocate(std::uint64_t size, std::uint32_t stream,
                                         std::string* why) {
  const std::uint64_t bytes = (std::max<std::uint64_t>(size, 1) + granularity_ - 1) /
                              granularity_ * granularity_;
  // The most recently freed range of the same size: its pages are the likeliest to be warm.
  for (auto it = cached_.rbegin(); it != cached_.rend(); ++it) {
    if (it->bytes != bytes) continue;
    if (const vmm::DevicePtr address = take_cached(std::next(it).base(), size, stream)) {
      return address;
    }
    break;
  }
  if (const vmm::DevicePtr address = take_cached_stitch(bytes, size, stream)) return address;
  // Below the most ever held, a new chunk costs no memory that counts: cached ranges stay for
  // their next tensor (releasing one and making another is two calls that may be undone at the
  // next request). Above it, what is cached or idle elsewhere goes first.
  const std::uint64_t room = memory_.high_water_bytes() - std::min(memory_.high_water_bytes(),
                                                                   memory_.reserved_bytes());
  if (bytes > room) {
    // Cached ranges that add up to it exactly are mapped together rather than released: their
    // own sizes come back (the forward pass's after the backward's), and the stitch is kept
    // for the next request of its size.
    if (const vmm::DevicePtr address = stitch(bytes, size, stream, StitchFrom::DoneExactly)) {
      return address;
    }
    const std::uint64_t over = bytes - room;
    if (const std::uint64_t released = release_for(over); released < over) {
      if (const vmm::DevicePtr address = serve_behind_gpu(bytes, size, stream)) {
        ++served_behind_gpu_;
        return address;
      }
      reclaimer_.bytes_for_range(over - released);
    }
  }
  Range r;
  r.bytes = bytes;
  std::optional<Chunk> chunk = memory_.acquire_dedicated(bytes / granularity_);
  if (!chunk) {
    *why = memory_.last_failure();
    return 0;
  }
  r.chunk = *chunk;
  if (driver_.reserve(&r.address, bytes) != vmm::Status::Success) {
    memory_.release_dedicated(r.chunk, bytes / granularity_);
    *why = "cuMemAddressReserve failed for a dedicated range of " + format_bytes(bytes);
    return 0;
  }
  if (driver_.map(r.address, bytes, 0, r.chunk.handle) != vmm::Status::Success) {
    driver_.free_reservation(r.address, bytes);
    memory_.release_dedicated(r.chunk, bytes / granularity_);
    *why = "mapping a dedicated range of " + format_bytes(bytes) + " failed (live mappings limit?)";
    return 0;
  }
  if (driver_.set_access(r.address, bytes, vmm::Access::ReadWrite) != vmm::Status::Success) {
    destroy(r);
    *why = "setting access to a dedicated range of " + format_bytes(bytes) + " failed";
    return 0;
  }
  return hand_out(std::move(r), size, stream);
}

vmm::DevicePtr DedicatedRanges::serve_behind_gpu(std::uint64_t bytes, std::uint64_t size,
                                                 std::uint32_t stream) {
  // What is left cached, the GPU still uses (release_for took all it could).
  auto whole = cached_.end();
  auto larger = cached_.end();
  for (auto it = cached_.begin(); it != cached_.end(); ++it) {
    if (it->bytes <= bytes || (larger != cached_.end() && it->bytes >= larger->bytes)) continue;
    larger = it;
    if (it->bytes <= bytes + bytes / kLargerShare) whole = it;
  }
  if (whole != cached_.end()) {
    if (const vmm::DevicePtr address = take_cached(whole, size, stream)) return address;
  }
  // The best-fitting gap of a shared range: between its blocks or after the last.
  auto fit_range = shared_.end();
  std::uint64_t fit_offset = 0;
  std::uint64_t fit_gap = UINT64_MAX;
  for (auto s = shared_.begin(); s != shared_.end(); ++s) {
    std::uint64_t at = 0;
    auto consider = [&](std::uint64_t end) {
      if (end - at >= bytes && end - at < fit_gap) {
        fit_range = s;
        fit_offset = at;
        fit_gap = end - at;
      }
    };
    for (const auto& [offset, taken] : s->blocks) {
      consider(offset);
      at = offset + taken;
    }
    consider(s->range.bytes);
  }
  if (fit_range != shared_.end()) {
    return take_piece(fit_range, fit_offset, bytes, size, stream);
  }
  if (larger == cached_.end()) return stitch(bytes, size, stream, StitchFrom::Any);
  if (larger->bytes > kSharedAtMost * bytes) return 0;
  shared_.push_back(Shared{uncache(larger), {}});
  const vmm::DevicePtr address = take_piece(std::prev(shared_.end()), 0, bytes, size, stream);
  if (address == 0) {
    cache(std::move(shared_.back().range));
    shared_.pop_back();
  }
  return address;
}

vmm::DevicePtr DedicatedRanges::stitch(std::uint64_t bytes, std::uint64_t size,
                                       std::uint32_t stream, StitchFrom from) {
  // The largest cached ranges smaller than the request until they cover it, the last one the
  // smallest that still does: as few calls as may be, and little of them left over.
  std::vector<std::list<Range>::iterator> order;
  for (auto it = cached_.begin(); it != cached_.end(); ++it) {
    if (it->bytes < bytes && (from == StitchFrom::Any || gpu_done(*it))) order.push_back(it);
  }
  std::sort(order.begin(), order.end(),
            [](auto a, auto b) { return a->bytes > b->bytes; });
  std::vector<std::list<Range>::iterator> parts;
  std::uint64_t sum = 0;
  std::size_t next = 0;
  while (sum < bytes && parts.size() < kStitchParts && next < order.size()) {
    const std::uint64_t need = bytes - sum;
    std::size_t pick = next;
    for (std::size_t k = next; k < order.size() && order[k]->bytes >= need; ++k) pick = k;
    std::swap(order[next], order[pick]);
    parts.push_back(order[next]);
    sum += order[next]->bytes;
    ++next;
  }
  if (sum < bytes || parts.size() < 2 || (from == StitchFrom::DoneExactly && sum != bytes)) {
    return 0;
  }
  StreamMask users = 0;
  for (auto it : parts) users |= it->users;
  vmm::DevicePtr address = 0;
  if (!sync_.order_after(users, stream, StreamSync::kUnstamped) ||
      driver_.reserve(&address, sum) != vmm::Status::Success) {
    return 0;
  }
  std::uint64_t mapped = 0;
  bool ok = true;
  for (auto it : parts) {
    if (driver_.map(address + mapped, it->bytes, 0, it->chunk.handle) != vmm::Status::Success) {
      ok = false;
      break;
    }
    mapped += it->bytes;
  }
  ok = ok && driver_.set_access(address, sum, vmm::Access::ReadWrite) == vmm::Status::Success;
  if (!ok) {
    std::uint64_t offset = 0;
    for (std::size_t k = 0; offset < mapped; ++k) {
      driver_.unmap(address + offset, parts[k]->bytes);
      offset += parts[k]->bytes;
    }
    driver_.free_reservation(address, sum);
    return 0;
  }
  Stitch st;
  st.address = address;
  st.bytes = sum;
  st.size = size;
  st.users = StreamSync::bit(stream);
  for (auto it : parts) {
    ++stitched_chunks_[it->chunk.handle];
    st.parts.push_back(uncache(it));
  }
  stitched_.emplace(address, std::move(st));
  live_bytes_ += size;
  return address;
}

bool DedicatedRanges::free_stitched(vmm::DevicePtr ptr, StreamMask used_by) {
  auto it = stitched_.find(ptr);
  if (it == stitched_.end()) return false;
  Stitch st = std::move(it->second);
  stitched_.erase(it);
  live_bytes_ -= st.size;
  st.users |= used_by;
  FreedStitch u;
  u.address = st.address;
  u.bytes = st.bytes;
  u.users = st.users;
  u.marker = markers_.take(st.users);
  markers_.end_free(u.marker);
  // The parts are cached again now: the next tensor on them is ordered after this one's streams.
  for (Range& part : st.parts) {
    u.part_bytes.push_back(part.bytes);
    u.part_chunks.push_back(part.chunk.handle);
    part.users |= st.users;
    part.freed = sync_.now();
    cache(std::move(part));
  }
  stitches_cached_.push_back(std::move(u));
  // The oldest cached stitches beyond the cap go, once the GPU is done with them.
  for (auto old = stitches_cached_.begin();
       stitches_cached_.size() > kCachedStitches && old != stitches_cached_.end();) {
    old = gpu_done(*old) ? unmap_stitch(old) : std::next(old);
  }
  return true;
}

std::list<DedicatedRanges::FreedStitch>::iterator DedicatedRanges::unmap_stitch(
    std::list<FreedStitch>::iterator it) {
  FreedStitch& u = *it;
  std::uint64_t offset = 0;
  for (std::size_t k = 0; k < u.part_bytes.size(); ++k) {
    driver_.unmap(u.address + offset, u.part_bytes[k]);
    offset += u.part_bytes[k];
    auto count = stitched_chunks_.find(u.part_chunks[k]);
    if (--count->second == 0) stitched_chunks_.erase(count);
  }
  driver_.free_reservation(u.address, u.bytes);
  markers_.release(u.marker);
  return stitches_cached_.erase(it);
}

bool DedicatedRanges::unstitch(vmm::ChunkHandle chunk) {
  if (stitched_chunks_.count(chunk) == 0) return true;
  for (auto it = stitches_cached_.begin(); it != stitches_cached_.end();) {
    const bool holds = std::find(it->part_chunks.begin(), it->part_chunks.end(), chunk) !=
                       it->part_chunks.end();
    it = holds && gpu_done(*it) ? unmap_stitch(it) : std::next(it);
  }
  return stitched_chunks_.count(chunk) == 0;
}

vmm::DevicePtr DedicatedRanges::take_cached_stitch(std::uint64_t bytes, std::uint64_t size,
                                                   std::uint32_t stream) {
  for (auto it = stitches_cached_.rbegin(); it != stitches_cached_.rend(); ++it) {
    const FreedStitch& u = *it;
    if (u.bytes != bytes) continue;
    // Usable only while every part is cached (not live on its own, in another stitch, shared).
    std::vector<std::list<Range>::iterator> parts;
    StreamMask users = u.users;
    for (std::size_t k = 0; k < u.part_chunks.size(); ++k) {
      auto part = std::find_if(cached_.begin(), cached_.end(), [&](const Range& r) {
        return r.chunk.handle == u.part_chunks[k] && r.bytes == u.part_bytes[k];
      });
      if (part == cached_.end()) break;
      users |= part->users;
      parts.push_back(part);
    }
    if (parts.size() != u.part_chunks.size()) continue;
    if (!sync_.order_after(users, stream, StreamSync::kUnstamped)) return 0;
    const vmm::DevicePtr address = u.address;
    Stitch st;
    st.address = address;
    st.bytes = u.bytes;
    st.size = size;
    st.users = StreamSync::bit(stream);
    for (auto part : parts) st.parts.push_back(uncache(part));
    markers_.release(u.marker);
    stitches_cached_.erase(std::next(it).base());
    stitched_.emplace(address, std::move(st));
    live_bytes_ += size;
    return address;
  }
  return 0;
}

vmm::DevicePtr DedicatedRanges::take_piece(std::list<Shared>::iterator shared,
                                           std::uint64_t offset, std::uint64_t bytes,
                                           std::uint64_t size, std::uint32_t stream) {
  Range& r = shared->range;
  if (!sync_.order_after(r.users, stream, r.freed)) return 0;
  r.users |= StreamSync::bit(stream);
  shared->blocks.emplace(offset, bytes);
  const vmm::DevicePtr address = r.address + offset;
  pieces_.emplace(address, Piece{shared, offset, size});
  live_bytes_ += size;
  return address;
}

bool DedicatedRanges::free_piece(vmm::DevicePtr ptr, StreamMask used_by) {
  auto it = pieces_.find(ptr);
  if (it == pieces_.end()) return false;
  const Piece piece = it->second;
  pieces_.erase(it);
  live_bytes_ -= piece.size;
  Range& r = piece.shared->range;
  r.users |= used_by;
  r.freed = sync_.now();
  piece.shared->blocks.erase(piece.offset);
  if (piece.shared->blocks.empty()) {
    cache(std::move(r));
    shared_.erase(piece.shared);
  }
  return true;
}

vmm::DevicePtr DedicatedRanges::take_cached(std::list<Range>::iterator it, std::uint64_t size,
                                            std::uint32_t stream) {
  if (!sync_.order_after(it->users, stream, it->freed)) return 0;
  return hand_out(uncache(it), size, stream);
}

DedicatedRanges::Range DedicatedRanges::uncache(std::list<Range>::iterator it) {
  Range r = std::move(*it);
  cached_.erase(it);
  cached_bytes_ -= r.bytes;
  markers_.release(r.marker);
  r.marker = FreeMarkers::kNone;
  return r;
}

vmm::DevicePtr DedicatedRanges::hand_out(Range r, std::uint64_t size, std::uint32_t stream) {
  r.size = size;
  r.users = StreamSync::bit(stream);
  live_bytes_ += size;
  const vmm::DevicePtr address = r.address;
  live_.emplace(address, std::move(r));
  return address;
}

std::uint64_t DedicatedRanges::live_range_bytes() const {
  std::uint64_t bytes = 0;
  for (const auto& [address, range] : live_) bytes += range.bytes;
  for (const Shared& s : shared_) bytes += s.range.bytes;
  for (const auto& [address, st] : stitched_) bytes += st.bytes;
  return bytes;
}

bool DedicatedRanges::free(vmm::DevicePtr ptr, StreamMask used_by) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return free_piece(ptr, used_by) || free_stitched(ptr, used_by);
  Range r = std::move(it->second);
  live_.erase(it);
  live_bytes_ -= r.size;
  r.users |= used_by;
  r.freed = sync_.now();
  cache(std::move(r));
  return true;
}

void DedicatedRanges::cache(Range r) {
  // When the GPU is done with it: the range is released only then. A marker the driver refused
  // to record leaves it cached until it is taken again or the runtime goes.
  r.marker = markers_.take(r.users);
  markers_.end_free(r.marker);
  cached_bytes_ += r.bytes;
  cached_.push_back(std::move(r));
}

std::uint64_t DedicatedRanges::release_cached() {
  const std::size_t before = cached_.size();
  release_for(UINT64_MAX);
  return before - cached_.size();
}

}  // namespace stalloc
