#include "src/packed_arena.h"

#include <algorithm>
#include <optional>

namespace stalloc {

PackedArena::PackedArena(vmm::Driver& driver, PhysicalMemory& memory, StreamSync& sync,
                         std::uint64_t reservation_bytes, std::uint32_t home,
                         std::uint64_t idle_bytes, IdleChunkLender* lender,
                         Reclaimer& reclaimer, std::uint64_t page_granules,
                         ArenaExtents extents)
    : driver_(driver),
      memory_(memory),
      sync_(sync),
      lender_(page_granules > 1 ? nullptr : lender),
      reclaimer_(reclaimer),
      page_granules_(std::max<std::uint64_t>(page_granules, 1)),
      granularity_(memory.granularity() * page_granules_),
      extents_(page_granules_ > 1 ? ArenaExtents{} : extents),
      reservation_bytes_((std::max<std::uint64_t>(reservation_bytes, 1) + granularity_ - 1) /
                         granularity_ * granularity_),
      home_(StreamSync::bit(home)),
      max_idle_pages_(idle_bytes / granularity_),
      markers_(sync) {}

PackedArena::~PackedArena() {
  for (std::uint64_t i = 0; i < pages_.size(); ++i) {
    Page& page = pages_[i];
    if (!page.mapped || page.from_head != 0) continue;
    sync_.discard(&page.events);
    driver_.unmap(base_ + i * granularity_, page.extent * granularity_);
    if (page.detached) continue;
    page.chunk.users |= pages_used_by(i, extent_end(i));
    return_chunk(page.chunk, page.lent, page.extent);
  }
  for (const Chunk& chunk : spare_) memory_.release_dedicated(chunk, page_granules_);
  if (base_ != 0) driver_.free_reservation(base_, reservation_bytes_);
}

bool PackedArena::ensure_reserved(std::string* why) {
  if (base_ != 0) return true;
  // Ask for the whole reservation, halving when the address space is short.
  for (std::uint64_t bytes = reservation_bytes_; bytes >= granularity_;
       bytes = bytes / 2 / granularity_ * granularity_) {
    if (driver_.reserve(&base_, bytes) == vmm::Status::Success) {
      reservation_bytes_ = bytes;
      add_span(0, bytes, home_);
      return true;
    }
    base_ = 0;
    if (bytes == granularity_) break;
  }
  *why = "cuMemAddressReserve failed for the packed arena";
  return false;
}

std::uint64_t PackedArena::unmapped_pages(std::uint64_t offset, std::uint64_t length,
                                          std::uint64_t enough) const {
  std::uint64_t count = 0;
  const std::uint64_t last = (offset + length - 1) / granularity_;
  for (std::uint64_t i = offset / granularity_; i <= last && count < enough; ++i) {
    if (i >= pages_.size() || !pages_[i].mapped) ++count;
  }
  return count;
}

PackedArena::Place PackedArena::place(std::uint64_t length) const {
  Place best;
  std::uint64_t best_cost = UINT64_MAX;
  auto consider = [&](std::uint64_t offset, const FreeSpan& span) {
    const std::uint64_t cost = unmapped_pages(offset, length, best_cost);
    if (cost < best_cost) {
      best = {offset, span.users, span.freed};
      best_cost = cost;
    }
  };
  const std::uint64_t touched = pages_.size() * granularity_;
  auto fit = free_by_length_.lower_bound({length, 0});
  for (int k = 0; k < kPlacementCandidates && fit != free_by_length_.end() && best_cost > 0;
       ++k, ++fit) {
    const auto [span_length, offset] = *fit;
    const FreeSpan& span = free_by_offset_.at(offset);
    consider(offset, span);
    // The span's end, where mapped pages may lie too; never beyond the pages ever used (the
    // tail span runs to the end of the reservation).
    if (span_length > length && offset + span_length <= touched) {
      consider((offset + span_length - length) / kAlignment * kAlignment, span);
    }
  }
  return best;
}

void PackedArena::add_span(std::uint64_t offset, std::uint64_t length, StreamMask users,
                           StreamSync::FreeStamp freed) {
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + length &&
      next->second.users == users) {
    length += next->second.length;
    freed = std::max(freed, next->second.freed);
    free_by_length_.erase({next->second.length, next->first});
    next = free_by_offset_.erase(next);
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.length == offset && prev->second.users == users) {
      offset = prev->first;
      length += prev->second.length;
      freed = std::max(freed, prev->second.freed);
      free_by_length_.erase({prev->second.length, prev->first});
      free_by_offset_.erase(prev);
    }
  }
  insert_span(offset, length, users, freed);
}

void PackedArena::insert_span(std::uint64_t offset, std::uint64_t length, StreamMask users,
                              StreamSync::FreeStamp freed) {
  free_by_offset_.emplace(offset, FreeSpan{length, users, freed});
  free_by_length_.emplace(length, offset);
}

void PackedArena::carve(std::uint64_t offset, std::uint64_t length) {
  const std::uint64_t end = offset + length;
  auto it = free_by_offset_.upper_bound(offset);
  if (it != free_by_offset_.begin()) --it;
  while (it != free_by_offset_.end() && it->first < end) {
    const std::uint64_t lo = it->first;
    const std::uint64_t hi = lo + it->second.length;
    const StreamMask users = it->second.users;
    const StreamSync::FreeStamp freed = it->second.freed;
    if (hi <= offset) {
      ++it;
      continue;
    }
    free_by_length_.erase({it->second.length, lo});
    it = free_by_offset_.erase(it);
    if (lo < offset) insert_span(lo, offset - lo, users, freed);
    if (hi > end) insert_span(end, hi - end, users, freed);
  }
}

void PackedArena::detach(std::uint64_t index) {
  Page& page = pages_[index];
  const std::uint32_t lent = page.lent;
  page.parked = false;
  page.lent = kOwnChunk;
  page.detached = true;
  --lent_pages_;
  lender_->give_back(lent, page.users);
  carve(index * granularity_, granularity_);
  if (allocating_) {
    deferred_.push_back(index);
  } else {
    retire(index);
  }
}

bool PackedArena::map_pages(std::uint64_t first, std::uint64_t last, StreamMask* sync_with,
                            std::vector<std::uint64_t>* mapped_now, std::string* why) {
  if (pages_.size() <= last) pages_.resize(last + 1);
  for (std::uint64_t i = first; i <= last; ++i) {
    Page& page = pages_[i];
    if (page.mapped) continue;
    std::uint32_t lent = kOwnChunk;
    std::uint64_t extent = 1;
    std::optional<Chunk> chunk;
    if (page_granules_ > 1) {
      chunk = large_page_chunk(first, last);
    } else {
      chunk = memory_.take_cached();
      if (!chunk && take_idle_chunk(first, last)) chunk = memory_.take_cached();
      if (!chunk && lender_ != nullptr) {
        auto borrowed = lender_->borrow();
        if (!borrowed) borrowed = lender_->take_parked(this, first, last);
        if (borrowed) {
          chunk = borrowed->chunk;
          lent = borrowed->index;
        }
      }
      if (!chunk && reclaimer_.chunk_for_arena(this)) chunk = memory_.take_cached();
      if (!chunk) {
        // Nothing to reuse: one new chunk for the run of unmapped pages from here.
        std::uint64_t end = i;
        const std::uint64_t limit = extent_limit();
        while (end < last && end + 1 - i < limit && !pages_[end + 1].mapped) ++end;
        if (end > i) {
          chunk = memory_.acquire_dedicated(end - i + 1);
          if (chunk) extent = end - i + 1;
        }
      }
      if (!chunk) chunk = memory_.acquire();
    }
    bool ok = chunk.has_value();
    if (!ok) {
      *why = memory_.last_failure();
    } else {
      ok = driver_.map(base_ + i * granularity_, extent * granularity_, 0, chunk->handle) ==
           vmm::Status::Success;
      if (!ok) {
        *why = "mapping a page of the packed arena failed (live mappings limit?)";
        return_chunk(*chunk, lent, extent);
      }
    }
    if (!ok) {
      for (std::uint64_t j : *mapped_now) unmap_page(j);
      mapped_now->clear();
      return false;
    }
    *sync_with |= chunk->users;
    page.chunk = *chunk;
    page.lent = lent;
    page.extent = static_cast<std::uint32_t>(extent);
    for (std::uint64_t k = 0; k < extent; ++k) {
      pages_[i + k].mapped = true;
      pages_[i + k].users = 0;
      pages_[i + k].from_head = static_cast<std::uint32_t>(k);
    }
    mapped_pages_ += extent;
    if (lent != kOwnChunk) ++lent_pages_;
    mapped_now->push_back(i);
    i += extent - 1;
  }
  // One cuMemSetAccess over the whole allocation, its pages mapped before included: the call
  // costs tens of microseconds however many mappings it covers (docs/driver_costs.md), where
  // one per page cost as much again as the mapping itself. It covers whole mappings, so the
  // extents at either end whole.
  const std::uint64_t from = head_of(first);
  const std::uint64_t to = extent_end(head_of(last));
  if (!mapped_now->empty() &&
      driver_.set_access(base_ + from * granularity_, (to - from + 1) * granularity_,
                         vmm::Access::ReadWrite) != vmm::Status::Success) {
    *why = "setting access to the packed arena's pages failed";
    for (std::uint64_t j : *mapped_now) unmap_page(j);
    mapped_now->clear();
    return false;
  }
  return true;
}

void PackedArena::unmap_page(std::uint64_t index) {
  Page& page = pages_[index];
  const std::uint64_t extent = page.extent;
  drop_marker(page);
  driver_.unmap(base_ + index * granularity_, extent * granularity_);
  if (page.detached) {
    add_span(index * granularity_, granularity_, home_);  // allocatable again
  } else {
    return_chunk(page.chunk, page.lent, extent);
    if (page.lent != kOwnChunk) --lent_pages_;
  }
  for (std::uint64_t k = index; k < index + extent; ++k) {
    const std::uint64_t generation = pages_[k].generation + 1;
    pages_[k] = Page{};
    pages_[k].generation = generation;
  }
  mapped_pages_ -= extent;
}

std::uint64_t PackedArena::extent_limit() const {
  if (memory_.reserved_bytes() < memory_.high_water_bytes()) return 1;
  std::uint64_t limit = extents_.max_granules;
  if (extents_.held_share > 0) {
    limit = std::min(limit, memory_.reserved_bytes() / extents_.held_share / granularity_);
  }
  return std::max<std::uint64_t>(limit, 1);
}

bool PackedArena::extent_empty(std::uint64_t head) const {
  for (std::uint64_t k = head; k <= extent_end(head); ++k) {
    if (pages_[k].tenants > 0) return false;
  }
  return true;
}

std::optional<Chunk> PackedArena::large_page_chunk(std::uint64_t first, std::uint64_t last) {
  if (spare_.empty()) {
    keep_unmapped_ = true;
    take_idle_chunk(first, last);
    keep_unmapped_ = false;
  }
  if (!spare_.empty()) {
    const Chunk chunk = spare_.back();
    spare_.pop_back();
    return chunk;
  }
  // Above the most ever held, other arenas' idle pages whose GPU work is done go first (to the
  // cache, released here), a granule at a time: a chunk of this size fits no other page, so
  // what they keep would otherwise stay beside it.
  for (std::uint64_t k = 0; k < page_granules_ &&
                            memory_.reserved_bytes() + granularity_ > memory_.high_water_bytes();
       ++k) {
    memory_.trim();
    if (memory_.reserved_bytes() + granularity_ <= memory_.high_water_bytes()) break;
    if (!reclaimer_.chunk_for_arena(this)) break;
  }
  memory_.trim();
  std::optional<Chunk> chunk = memory_.acquire_dedicated(page_granules_);
  // At the capacity: the same, until a chunk can be made.
  for (std::uint64_t k = 0; !chunk && k < page_granules_ && reclaimer_.chunk_for_arena(this); ++k) {
    chunk = memory_.acquire_dedicated(page_granules_);
  }
  return chunk;
}

void PackedArena::return_chunk(const Chunk& chunk, std::uint32_t lent, std::uint64_t extent) {
  if (lent == kOwnChunk && extent > 1) {
    memory_.release_dedicated(chunk, extent);
  } else if (lent == kOwnChunk && page_granules_ > 1) {
    if (keep_unmapped_) {
      spare_.push_back(chunk);
    } else {
      memory_.release_dedicated(chunk, page_granules_);
    }
  } else if (lent == kOwnChunk) {
    memory_.give_back(chunk);
  } else {
    lender_->give_back(lent, chunk.users);
  }
}

vmm::DevicePtr PackedArena::allocate(std::uint64_t size, std::uint32_t stream, std::string* why) {
  poll();
  if (!ensure_reserved(why)) return 0;
  const std::uint64_t length =
      (std::max<std::uint64_t>(size, 1) + kAlignment - 1) / kAlignment * kAlignment;
  const Place spot = place(length);
  const std::uint64_t offset = spot.offset;
  if (offset == kNoPlace) {
    *why = "the packed arena's " + std::to_string(reservation_bytes_) +
           " bytes of address space are full";
    return 0;
  }
  const std::uint64_t first = offset / granularity_;
  const std::uint64_t last = (offset + length - 1) / granularity_;
  StreamMask chunk_users = 0;  // of chunks mapped now, freed at a time not known here
  std::vector<std::uint64_t> mapped_now;
  // While pages are mapped for [offset, offset + length), a parked page elsewhere may be
  // detached (take_parked never picks one of first..last): its retirement waits for the next
  // poll, so the span starting at offset keeps its start and its length.
  allocating_ = true;
  const bool mapped = map_pages(first, last, &chunk_users, &mapped_now, why);
  allocating_ = false;
  if (!mapped) return 0;
  if (!sync_.order_after(spot.users | chunk_users, stream,
                         chunk_users != 0 ? StreamSync::kUnstamped : spot.freed)) {
    *why = "stream ordering failed for a packed allocation";
    for (std::uint64_t i : mapped_now) unmap_page(i);
    return 0;
  }
  carve(offset, length);
  for (std::uint64_t i = first; i <= last; ++i) {
    Page& head = pages_[head_of(i)];
    if (head.idle) {
      head.idle = false;
      idle_pages_ -= head.extent;
      ++head.generation;
      drop_marker(head);
    }
    if (head.parked) {
      head.parked = false;
      lender_->unpark(head.lent);
    }
    if (!head.events.empty()) {
      // Wanted again before its unmap: keep the mapping, forget the pending unmap.
      sync_.discard(&head.events);
      ++head.generation;
    }
    ++pages_[i].tenants;
    pages_[i].users |= StreamSync::bit(stream);
  }
  const vmm::DevicePtr address = base_ + offset;
  live_.emplace(address, Block{address, size, length});
  live_bytes_ += size;
  return address;
}

void PackedArena::release_tenancy(std::uint64_t first, std::uint64_t last, StreamMask used_by) {
  std::uint32_t marker = kNoMarker;
  for (std::uint64_t i = first; i <= last; ++i) {
    pages_[i].users |= used_by;
    if (--pages_[i].tenants > 0) continue;
    const std::uint64_t h = head_of(i);
    Page& page = pages_[h];
    if (page.lent != kOwnChunk) {
      page.parked = true;
      lender_->park(page.lent, this, i);
      if (lender_->wanted(page.lent)) detach(i);
      continue;
    }
    if (page.extent > 1 && !extent_empty(h)) continue;
    page.idle = true;
    // Marks the work that used it, so that the arena can take the page's chunk for another
    // page once that work is done (take_idle_chunk) without a host wait. The pages of this free
    // and of the frees after it share one marker (free_markers.h); it covers the streams that
    // used the extents of the pages freed, emptied by earlier frees too.
    if (marker == kNoMarker) {
      marker = markers_.take(pages_used_by(head_of(first), extent_end(head_of(last))));
    } else {
      markers_.add_holder(marker);
    }
    page.marker = marker;
    idle_.push_back({h, page.generation});
    idle_pages_ += page.extent;
  }
  markers_.end_free(marker);
  // Entries of pages taken again stay in idle_ until they reach its front, which an arena that
  // keeps every idle page may never pop: drop them once they outnumber the live ones.
  if (idle_.size() > 2 * idle_pages_ + 64) {
    std::erase_if(idle_, [&](const Pending& p) {
      return pages_[p.page].generation != p.generation || !pages_[p.page].idle;
    });
  }
  while (idle_pages_ > max_idle_pages_) retire_oldest_idle();
}

void PackedArena::set_idle_bytes(std::uint64_t idle_bytes) {
  max_idle_pages_ = idle_bytes / granularity_;
  while (idle_pages_ > max_idle_pages_) retire_oldest_idle();
}

void PackedArena::retire_oldest_idle() {
  while (!idle_.empty()) {
    const Pending p = idle_.front();
    idle_.pop_front();
    Page& page = pages_[p.page];
    if (page.generation != p.generation || !page.idle) continue;
    page.idle = false;
    idle_pages_ -= page.extent;
    retire(p.page);
    return;
  }
}

StreamMask PackedArena::pages_used_by(std::uint64_t first, std::uint64_t last) const {
  StreamMask users = 0;
  for (std::uint64_t i = first; i <= last; ++i) users |= pages_[i].users;
  return users;
}

void PackedArena::drop_marker(Page& page) {
  markers_.release(page.marker);
  page.marker = kNoMarker;
}

std::uint64_t PackedArena::give_idle_chunk() { return take_idle_chunk(1, 0); }

std::uint64_t PackedArena::emptied_bytes() const {
  std::uint64_t pages = idle_pages_;
  for (const Pending& p : pending_) {
    const Page& page = pages_[p.page];
    if (page.generation == p.generation && !page.events.empty()) pages += page.extent;
  }
  return pages * granularity_;
}

std::uint64_t PackedArena::occupied_own_pages() const {
  std::uint64_t occupied = 0;
  for (std::uint64_t i = 0; i < pages_.size(); ++i) {
    const Page& page = pages_[i];
    if (page.mapped && page.from_head == 0 && page.lent == kOwnChunk && !extent_empty(i)) {
      occupied += page.extent;
    }
  }
  return occupied;
}

std::uint64_t PackedArena::take_idle_chunk(std::uint64_t first, std::uint64_t last) {
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    Page& page = pages_[it->page];
    if (page.generation != it->generation || !page.idle) continue;
    if (first <= last && first <= extent_end(it->page) && it->page <= last) continue;
    // Pages emptied later were marked later: when this one's GPU work is not done, theirs is
    // unlikely to be, and querying each (a driver call per page, on every page mapped) would
    // cost more than the chunk saves.
    const std::uint64_t index = it->page;
    const bool done = page.marker == kNoMarker ? pages_used_by(index, extent_end(index)) == 0
                                               : markers_.done(page.marker);
    if (!done) return 0;
    const std::uint64_t bytes = page.extent * granularity_;
    idle_.erase(it);
    page.idle = false;
    idle_pages_ -= page.extent;
    page.chunk.users = 0;
    unmap_page(index);
    return bytes;
  }
  return 0;
}

void PackedArena::retire(std::uint64_t index) {
  Page& page = pages_[index];
  // An idle page's marker, recorded as it emptied, covers its last use: done, the page goes
  // now; not yet, fresh events say when.
  if (page.marker != kNoMarker) {
    const bool done = markers_.done(page.marker);
    drop_marker(page);
    if (done) {
      page.chunk.users = 0;
      unmap_page(index);
      return;
    }
  }
  const StreamMask users = pages_used_by(index, extent_end(index));
  if (sync_.record(users, &page.events) && !page.events.empty()) {
    pending_.push_back({index, page.generation});
  } else if (page.events.empty() && users == 0) {
    unmap_page(index);
  } else if (page.detached) {
    // No event says when the GPU is done; the page's bytes are out of the free list until its
    // unmap, so try again at the next poll.
    sync_.discard(&page.events);
    deferred_.push_back(index);
  } else {
    // No event says when the GPU is done: the page stays mapped, empty, until it is wanted
    // again or the arena goes.
    sync_.discard(&page.events);
  }
}

std::uint64_t PackedArena::release_idle() {
  std::uint64_t released = idle_pages_;
  while (idle_pages_ > 0) retire_oldest_idle();
  // Parked chunks go back to the pool at once (with their streams); the pages follow after
  // their events.
  for (std::uint64_t i = 0; i < pages_.size() && lender_ != nullptr && lender_->parked() > 0; ++i) {
    if (!pages_[i].parked) continue;
    detach(i);
    ++released;
  }
  poll();
  return released;
}

bool PackedArena::free(vmm::DevicePtr ptr, StreamMask used_by) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  const Block block = it->second;
  live_.erase(it);
  live_bytes_ -= block.size;
  const std::uint64_t offset = ptr - base_;
  add_span(offset, block.bytes, used_by, sync_.now());
  release_tenancy(offset / granularity_, (offset + block.bytes - 1) / granularity_, used_by);
  poll();
  return true;
}

void PackedArena::poll() {
  if (!deferred_.empty()) {
    const std::vector<std::uint64_t> detached = std::move(deferred_);
    deferred_.clear();
    for (std::uint64_t index : detached) retire(index);
  }
  while (!pending_.empty()) {
    const Pending p = pending_.front();
    Page& page = pages_[p.page];
    if (page.generation != p.generation || page.events.empty()) {
      pending_.pop_front();
      continue;
    }
    if (!sync_.completed(&page.events)) return;
    page.chunk.users = 0;
    unmap_page(p.page);
    pending_.pop_front();
  }
}

std::vector<PackedArena::Run> PackedArena::runs() const {
  std::vector<Block> blocks;
  blocks.reserve(live_.size());
  for (const auto& [address, block] : live_) blocks.push_back(block);
  std::sort(blocks.begin(), blocks.end(),
            [](const Block& a, const Block& b) { return a.address < b.address; });
  std::vector<Run> out;
  std::size_t next_block = 0;
  for (std::uint64_t i = 0; i < pages_.size(); ++i) {
    if (!pages_[i].mapped || pages_[i].detached) continue;  // a detached chunk is the pool's
    const vmm::DevicePtr at = base_ + i * granularity_;
    if (out.empty() || out.back().base + out.back().bytes != at) out.push_back({at, 0, {}});
    out.back().bytes += granularity_;
    while (next_block < blocks.size() && blocks[next_block].address < at + granularity_) {
      out.back().blocks.push_back(blocks[next_block++]);
    }
  }
  return out;
}

}  // namespace stalloc
