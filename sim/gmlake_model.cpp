#include "sim/gmlake_model.h"

#include <algorithm>

namespace stalloc {

namespace {

constexpr std::size_t kMaxCachedRanges = 64;

}  // namespace

GmlakeModel::GmlakeModel(const PytorchAllocConf& conf, std::uint64_t capacity, std::uint64_t granularity,
                         std::uint64_t stitch_threshold)
    : PytorchCachingModel("gmlake", conf, capacity),
      granularity_(granularity),
      stitch_threshold_(stitch_threshold) {}

std::uint64_t GmlakeModel::pool_size(std::uint64_t requested) const {
  const std::uint64_t rounded = round_size(requested);
  if (rounded <= kSmallSize) return rounded;
  return (rounded + granularity_ - 1) / granularity_ * granularity_;
}

void GmlakeModel::count_segment_create(std::uint64_t bytes, bool small) {
  if (small) {
    add_calls(vmm::CallKind::CudaMalloc);
    return;
  }
  count_range_mapped(bytes, true);
}

void GmlakeModel::count_segment_release(std::uint64_t bytes, bool small) {
  if (small) {
    add_calls(vmm::CallKind::CudaFree);
    return;
  }
  count_range_unmapped(bytes, true);
}

// An address range mapped chunk by chunk (cuMemCreate each when `fresh`), access set once.
void GmlakeModel::count_range_mapped(std::uint64_t bytes, bool fresh) {
  add_calls(vmm::CallKind::Reserve);
  if (fresh) add_calls(vmm::CallKind::Create, chunks(bytes));
  add_calls(vmm::CallKind::Map, chunks(bytes));
  add_calls(vmm::CallKind::SetAccess);
  add_calls(vmm::CallKind::SetAccessExtra, bytes / kSmallBuffer - 1);
}

void GmlakeModel::count_range_unmapped(std::uint64_t bytes, bool release) {
  add_calls(vmm::CallKind::Unmap, chunks(bytes));
  if (release) add_calls(vmm::CallKind::Release, chunks(bytes));
  add_calls(vmm::CallKind::AddressFree);
}

GmlakeModel::Block* GmlakeModel::carve(std::uint32_t stream, const Piece& piece) {
  Block* holder = nullptr;
  for (Block* b : free_pool(false)) {
    if (b->stream == stream && b->addr <= piece.addr && piece.addr + piece.size <= b->addr + b->size) {
      holder = b;
      break;
    }
  }
  if (!holder) return nullptr;
  take(holder);
  if (piece.addr > holder->addr) {
    split(holder, piece.addr - holder->addr);
    Block* rest = holder->next;
    take(rest);
    free_block(holder);
    holder = rest;
  }
  if (holder->size > piece.size) split(holder, piece.size);
  return holder;
}

bool GmlakeModel::reuse_cached_range(const Event& e, std::uint64_t size, std::uint64_t* address) {
  auto wholly_free = [&](const Piece& p) {
    for (const Block* b : free_pool(false)) {
      if (b->stream == e.stream && b->addr <= p.addr && p.addr + p.size <= b->addr + b->size) return true;
    }
    return false;
  };
  for (auto it = cached_ranges_.lower_bound(size); it != cached_ranges_.end() && it->first < size + kLargeBuffer; ++it) {
    const StitchedRange& range = it->second;
    if (range.stream != e.stream || !std::all_of(range.pieces.begin(), range.pieces.end(), wholly_free)) continue;
    LiveStitch live;
    live.range = range;
    for (const Piece& p : range.pieces) live.blocks.push_back(carve(e.stream, p));
    *address = range.address;
    live_stitches_.emplace(e.id, std::move(live));
    cached_ranges_.erase(it);
    ++stitch_reuses_;
    return true;
  }
  return false;
}

bool GmlakeModel::serve_from_cache(const Event& e, std::uint64_t size, std::uint64_t* address) {
  if (size <= kSmallSize || size < stitch_threshold_) return false;
  if (reuse_cached_range(e, size, address)) return true;

  // Largest free blocks of this stream first, until they cover the request.
  FreeSet& pool = free_pool(false);
  Block key;
  key.stream = e.stream + 1;
  std::vector<Block*> chosen;
  std::uint64_t total = 0;
  for (auto it = pool.lower_bound(&key); it != pool.begin() && total < size;) {
    --it;
    if ((*it)->stream != e.stream) break;
    chosen.push_back(*it);
    total += (*it)->size;
  }
  if (total < size) return false;
  for (Block* b : chosen) take(b);
  if (total - size >= granularity_) {
    Block* last = chosen.back();
    const std::uint64_t excess = (total - size) / granularity_ * granularity_;
    split(last, last->size - excess);
    total -= excess;
  }
  LiveStitch live;
  live.range.address = new_address_range(total);
  live.range.size = total;
  live.range.stream = e.stream;
  for (Block* b : chosen) live.range.pieces.push_back({b->addr, b->size});
  live.blocks = std::move(chosen);
  count_range_mapped(total, false);
  *address = live.range.address;
  live_stitches_.emplace(e.id, std::move(live));
  ++stitches_;
  return true;
}

bool GmlakeModel::release_other(const Event& e) {
  auto it = live_stitches_.find(e.id);
  if (it == live_stitches_.end()) return false;
  for (Block* b : it->second.blocks) free_block(b);
  if (cached_ranges_.size() >= kMaxCachedRanges) {
    // Drop the smallest cached range: unmap its chunks and free its address space.
    count_range_unmapped(cached_ranges_.begin()->second.size, false);
    cached_ranges_.erase(cached_ranges_.begin());
  }
  cached_ranges_.emplace(it->second.range.size, std::move(it->second.range));
  live_stitches_.erase(it);
  return true;
}

}  // namespace stalloc
