#include "sim/pytorch_caching_model.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

#include "common/error.h"

namespace stalloc {

namespace {

constexpr std::uint64_t kUnlimitedRange = 1ull << 40;  // expandable range without a capacity

std::uint64_t round_up(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }

// PyTorch's roundup_power2_next_division: the next of `divisions` equal steps between the
// powers of two around size.
std::uint64_t next_division(std::uint64_t size, std::uint64_t divisions) {
  if (std::has_single_bit(size)) return size;
  const std::uint64_t floor = std::bit_floor(size);
  const std::uint64_t step = floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return floor << 1;
  const std::uint64_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}

}  // namespace

bool PytorchCachingModel::BySize::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->addr < b->addr;
}

bool PytorchCachingModel::ByAddress::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  return a->addr < b->addr;
}

PytorchCachingModel::PytorchCachingModel(std::string name, const PytorchAllocConf& conf,
                                         std::uint64_t capacity)
    : name_(std::move(name)), conf_(conf), capacity_(capacity) {
  // PyTorch reserves 1 1/8 of the device memory per expandable segment, in whole pages.
  expandable_range_ = capacity == 0 ? kUnlimitedRange : round_up(capacity + capacity / 8, kLargeBuffer);
}

PytorchCachingModel::~PytorchCachingModel() = default;

std::uint64_t PytorchCachingModel::round_size(std::uint64_t size) const {
  if (size < kMinBlockSize) return kMinBlockSize;
  const std::uint64_t divisions = roundup_divisions_for(conf_, size);
  if (divisions > 1 && size > kMinBlockSize * divisions) return next_division(size, divisions);
  return round_up(size, kMinBlockSize);
}

std::uint64_t PytorchCachingModel::allocation_size(std::uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded, kRoundLarge);
}

PytorchCachingModel::Block* PytorchCachingModel::new_block() {
  if (!spare_blocks_.empty()) {
    Block* b = spare_blocks_.back();
    spare_blocks_.pop_back();
    *b = Block{};
    return b;
  }
  block_storage_.push_back(std::make_unique<Block>());
  return block_storage_.back().get();
}

void PytorchCachingModel::delete_block(Block* b) { spare_blocks_.push_back(b); }

std::uint64_t PytorchCachingModel::new_address_range(std::uint64_t bytes) {
  const std::uint64_t base = next_address_;
  next_address_ = round_up(next_address_ + bytes, kSmallBuffer);
  return base;
}

bool PytorchCachingModel::allocate(const Event& e, std::uint64_t* address) {
  if (live_.count(e.id)) throw UsageError(name_ + ": allocation id " + std::to_string(e.id) + " is already live");
  const std::uint64_t size = pool_size(e.size);
  const bool small = size <= kSmallSize;
  const std::uint64_t alloc_size = allocation_size(size);

  Block* b = get_free_block(e.stream, small, size);
  if (!b && serve_from_cache(e, size, address)) return true;
  if (!b) {
    if (capacity_ > 0 && conf_.garbage_collection_threshold > 0.0) garbage_collect();
    b = alloc_block(e.stream, small, size, alloc_size);
    if (!b && release_available_cached_blocks(e.stream, small, size)) b = alloc_block(e.stream, small, size, alloc_size);
    if (!b && release_cached_blocks()) b = alloc_block(e.stream, small, size, alloc_size);
  }
  if (!b) return false;
  if (should_split(b, size)) split(b, size);
  b->allocated = true;
  live_.emplace(e.id, b);
  *address = b->addr;
  return true;
}

void PytorchCachingModel::deallocate(const Event& e) {
  auto it = live_.find(e.id);
  if (it == live_.end()) {
    if (release_other(e)) return;
    throw UsageError(name_ + ": free of allocation id " + std::to_string(e.id) + " which is not live");
  }
  Block* b = it->second;
  live_.erase(it);
  free_block(b);
}

bool PytorchCachingModel::serve_from_cache(const Event&, std::uint64_t, std::uint64_t*) { return false; }
bool PytorchCachingModel::release_other(const Event&) { return false; }
void PytorchCachingModel::count_segment_create(std::uint64_t, bool) { add_calls(vmm::CallKind::CudaMalloc); }
void PytorchCachingModel::count_segment_release(std::uint64_t, bool) { add_calls(vmm::CallKind::CudaFree); }

PytorchCachingModel::Block* PytorchCachingModel::get_free_block(std::uint32_t stream, bool small,
                                                                std::uint64_t size) {
  FreeSet& pool = free_pool(small);
  if (conf_.garbage_collection_threshold > 0.0 && capacity_ > 0) ++free_searches_[small ? 1 : 0];
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  if ((*it)->segment->expandable) {
    // A free block followed by unmapped space can grow into it: for best fit it counts as large
    // as it can grow, so other blocks are preferred to it (PyTorch's expandable_size).
    auto growable = [](const Block* b) { return b->size + (b->next && !b->next->mapped ? b->next->size : 0); };
    auto next = std::next(it);
    while ((*it)->segment->expandable && next != pool.end() && (*next)->stream == stream &&
           growable(*next) < growable(*it)) {
      it = next++;
    }
  }
  const std::uint64_t max_split = conf_.max_split_size;
  if (size < max_split && (*it)->size >= max_split) return nullptr;
  if (size >= max_split && (*it)->size >= size + kLargeBuffer) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

PytorchCachingModel::Block* PytorchCachingModel::alloc_block(std::uint32_t stream, bool small, std::uint64_t size,
                                                             std::uint64_t alloc_size) {
  // PyTorch checks the segment size it would cudaMalloc against the memory fraction even in
  // expandable mode, where it then maps less.
  if (capacity_ > 0 && reserved_ + alloc_size > capacity_) return nullptr;
  if (conf_.expandable_segments) return alloc_expandable(stream, small, size);
  return alloc_segment(stream, small, alloc_size);
}

PytorchCachingModel::Block* PytorchCachingModel::alloc_segment(std::uint32_t stream, bool small,
                                                               std::uint64_t alloc_size) {
  auto seg = std::make_unique<Segment>();
  seg->base = new_address_range(alloc_size);
  seg->size = alloc_size;
  seg->small = small;
  Block* b = new_block();
  b->addr = seg->base;
  b->size = alloc_size;
  b->stream = stream;
  b->small = small;
  b->segment = seg.get();
  segments_.emplace(seg->base, std::move(seg));
  reserved_ += alloc_size;
  count_segment_create(alloc_size, small);
  return b;
}

PytorchCachingModel::Block* PytorchCachingModel::alloc_expandable(std::uint32_t stream, bool small,
                                                                  std::uint64_t size) {
  Block* candidate = find_expandable_block(stream, small, size);
  if (!candidate) return nullptr;
  if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, size))) return nullptr;
  while (candidate->size < size) {
    Block* grow = candidate->next;
    if (!map_block(grow, std::min(size - candidate->size, grow->size))) return nullptr;
    candidate = grow;  // map_block merged the free block before it into `grow`
  }
  free_pool(small).erase(candidate);
  return candidate;
}

PytorchCachingModel::Block* PytorchCachingModel::find_expandable_block(std::uint32_t stream, bool small,
                                                                       std::uint64_t size) {
  auto room_from = [size](const Block* b) {
    std::uint64_t bytes = 0;
    while (bytes < size && b && !b->allocated) {
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size;
  };
  auto& unmapped = unmapped_[small ? 1 : 0];
  Block key;
  key.stream = stream;
  for (auto it = unmapped.lower_bound(&key); it != unmapped.end() && (*it)->stream == stream; ++it) {
    Block* c = *it;
    if (c->prev && !c->prev->allocated) c = c->prev;  // a free block just before can be grown
    if (room_from(c)) return c;
  }
  const std::uint64_t range = round_up(std::max(expandable_range_, size), page_size(small));
  auto seg = std::make_unique<Segment>();
  seg->base = new_address_range(range);
  seg->size = range;
  seg->expandable = true;
  seg->small = small;
  Block* b = new_block();
  b->addr = seg->base;
  b->size = range;
  b->stream = stream;
  b->small = small;
  b->mapped = false;
  b->segment = seg.get();
  segments_.emplace(seg->base, std::move(seg));
  unmapped.insert(b);
  add_calls(vmm::CallKind::Reserve);
  return b;
}

bool PytorchCachingModel::map_block(Block* b, std::uint64_t size) {
  const std::uint64_t page = page_size(b->small);
  const std::uint64_t bytes = std::min(b->size, round_up(size, page));
  if (capacity_ > 0 && reserved_ + bytes > capacity_) return false;  // cuMemCreate fails
  unmapped_[b->small ? 1 : 0].erase(b);
  b->mapped = true;
  if (bytes < b->size) {
    Block* rest = new_block();
    *rest = *b;
    rest->addr = b->addr + bytes;
    rest->size = b->size - bytes;
    rest->mapped = false;
    rest->prev = b;
    if (rest->next) rest->next->prev = rest;
    b->next = rest;
    b->size = bytes;
    unmapped_[b->small ? 1 : 0].insert(rest);
  }
  try_merge(b, b->prev);
  try_merge(b, b->next);
  b->gc_base = free_searches_[b->small ? 1 : 0];
  free_pool(b->small).insert(b);
  reserved_ += bytes;
  // cuMemCreate + cuMemMap per page, one cuMemSetAccess over them all.
  add_calls(vmm::CallKind::Create, bytes / page);
  add_calls(vmm::CallKind::Map, bytes / page);
  add_calls(vmm::CallKind::SetAccess);
  add_calls(vmm::CallKind::SetAccessExtra, bytes / kSmallBuffer - 1);
  return true;
}

void PytorchCachingModel::unmap_block(Block* b) {
  const std::uint64_t page = page_size(b->small);
  const std::uint64_t base = b->segment->base;
  const std::uint64_t begin = base + round_up(b->addr - base, page);
  const std::uint64_t end = base + (b->addr + b->size - base) / page * page;
  if (begin >= end) return;
  FreeSet& pool = free_pool(b->small);
  pool.erase(b);
  if (begin > b->addr) {
    Block* before = new_block();
    *before = *b;
    before->size = begin - b->addr;
    before->next = b;
    if (before->prev) before->prev->next = before;
    b->prev = before;
    pool.insert(before);
  }
  if (end < b->addr + b->size) {
    Block* after = new_block();
    *after = *b;
    after->addr = end;
    after->size = b->addr + b->size - end;
    after->prev = b;
    if (after->next) after->next->prev = after;
    b->next = after;
    pool.insert(after);
  }
  b->addr = begin;
  b->size = end - begin;
  b->mapped = false;
  try_merge(b, b->prev);
  try_merge(b, b->next);
  unmapped_[b->small ? 1 : 0].insert(b);
  reserved_ -= end - begin;
  add_calls(vmm::CallKind::Unmap, (end - begin) / page);
  add_calls(vmm::CallKind::Release, (end - begin) / page);
}

bool PytorchCachingModel::should_split(const Block* b, std::uint64_t size) const {
  const std::uint64_t remaining = b->size - size;
  if (b->small || conf_.expandable_segments) return remaining >= kMinBlockSize;
  return size < conf_.max_split_size && remaining > kSmallSize;
}

void PytorchCachingModel::split(Block* b, std::uint64_t size) {
  Block* rest = new_block();
  *rest = *b;
  rest->addr = b->addr + size;
  rest->size = b->size - size;
  rest->allocated = false;
  rest->prev = b;
  if (rest->next) rest->next->prev = rest;
  b->next = rest;
  b->size = size;
  rest->gc_base = free_searches_[rest->small ? 1 : 0];
  free_pool(rest->small).insert(rest);
}

void PytorchCachingModel::take(Block* b) {
  free_pool(b->small).erase(b);
  b->allocated = true;
}

void PytorchCachingModel::try_merge(Block* dst, Block* src) {
  if (!src || src->allocated || src->mapped != dst->mapped) return;
  // Both sets order by address or size, so src leaves its set before dst changes shape; dst
  // is never in a set while this runs.
  if (src->mapped) {
    free_pool(src->small).erase(src);
  } else {
    unmapped_[src->small ? 1 : 0].erase(src);
  }
  if (dst->prev == src) {
    dst->addr = src->addr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  dst->size += src->size;
  delete_block(src);
}

void PytorchCachingModel::free_block(Block* b) {
  b->allocated = false;
  try_merge(b, b->prev);
  try_merge(b, b->next);
  b->gc_base = free_searches_[b->small ? 1 : 0];
  free_pool(b->small).insert(b);
}

void PytorchCachingModel::release_block(Block* b) {
  free_pool(b->small).erase(b);
  const std::uint64_t bytes = b->segment->size;
  const bool small = b->small;
  segments_.erase(b->segment->base);
  reserved_ -= bytes;
  count_segment_release(bytes, small);
  delete_block(b);
}

void PytorchCachingModel::release_expandable_segment(Block* b) {
  unmapped_[b->small ? 1 : 0].erase(b);
  segments_.erase(b->segment->base);
  add_calls(vmm::CallKind::AddressFree);
  delete_block(b);
}

bool PytorchCachingModel::release_available_cached_blocks(std::uint32_t stream, bool small, std::uint64_t size) {
  const std::uint64_t max_split = conf_.max_split_size;
  if (max_split == std::numeric_limits<std::uint64_t>::max()) return false;
  FreeSet& pool = free_pool(small);
  Block key;
  key.stream = stream;
  key.size = std::max(size, max_split);
  auto it = pool.lower_bound(&key);
  if (it != pool.end() && (*it)->stream == stream && !(*it)->segment->expandable) {
    if ((*it)->prev || (*it)->next) return false;
    add_calls(vmm::CallKind::DeviceSync);  // cudaFree waits for the device
    release_block(*it);
    return true;
  }
  // No single cached block is large enough: release oversize ones, largest first.
  if (it == pool.begin()) return false;
  std::uint64_t released = 0;
  --it;
  while (released < key.size && (*it)->size >= max_split && (*it)->stream == stream) {
    Block* cur = *it;
    const bool first = it == pool.begin();
    if (!first) --it;
    if (!cur->segment->expandable && !cur->prev && !cur->next) {
      released += cur->size;
      release_block(cur);
    }
    if (first) break;
  }
  // The first cudaFree waits for the device; the ones after it find it idle.
  if (released > 0) add_calls(vmm::CallKind::DeviceSync);
  return released >= key.size;
}

bool PytorchCachingModel::release_cached_blocks() {
  // PyTorch synchronizes its outstanding events (and so the device) before it frees anything.
  add_calls(vmm::CallKind::DeviceSync);
  for (bool small : {false, true}) {
    std::vector<Block*> whole, expandable;
    for (Block* b : free_pool(small)) {
      if (b->segment->expandable) {
        expandable.push_back(b);
      } else if (!b->prev && !b->next) {
        whole.push_back(b);
      }
    }
    for (Block* b : whole) release_block(b);
    for (Block* b : expandable) {
      unmap_block(b);
      if (!b->mapped && !b->prev && !b->next) release_expandable_segment(b);
    }
  }
  return true;
}

void PytorchCachingModel::garbage_collect() {
  const auto threshold = static_cast<std::uint64_t>(conf_.garbage_collection_threshold * static_cast<double>(capacity_));
  if (reserved_ <= threshold) return;
  const std::uint64_t target = reserved_ - threshold;
  FreeSet& pool = free_pool(false);
  const std::uint64_t now = free_searches_[0];
  auto freeable = [](const Block* b) { return !b->prev && !b->next && !b->segment->expandable; };
  double total_age = 0;
  std::uint64_t count = 0;
  for (const Block* b : pool) {
    if (freeable(b)) {
      total_age += static_cast<double>(now - b->gc_base);
      ++count;
    }
  }
  std::uint64_t reclaimed = 0;
  bool freed = true;
  // Release the blocks older than the average first; repeat until enough is reclaimed.
  while (reclaimed < target && freed && count > 0) {
    const double threshold_age = total_age / static_cast<double>(count);
    freed = false;
    std::vector<Block*> victims;
    for (Block* b : pool) {
      if (freeable(b) && static_cast<double>(now - b->gc_base) >= threshold_age) victims.push_back(b);
    }
    for (Block* b : victims) {
      freed = true;
      reclaimed += b->size;
      total_age -= static_cast<double>(now - b->gc_base);
      --count;
      release_block(b);
    }
  }
}

}  // namespace stalloc
