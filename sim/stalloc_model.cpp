// The published STAlloc design (docs/planner.md, "The STAlloc allocator model"), replayed request
// by request. It is kept beside the simulator's stalloc rows, which run this project's runtime
// itself (sim/runtime_model.cpp): it shows what the published single-pool design reserves and
// which driver calls it makes on the same trace.
//
// Iterations up to the profiled one (1, or 0 for a one-iteration trace) are served by a caching
// pool; the profiled iteration is planned in offset mode when it ends, and later iterations are
// served from that plan's pool (one cudaMalloc; the caching pool's cached blocks above 1 MiB
// are freed when it is installed). Requests of at most 512 B come from a slab, iteration 0's
// persistent tensors and whatever the plan does not cover from the caching pool.
//
// Physical honesty: every planned request is checked against the bytes of the pool chunks that
// live tensors hold right now, not only against the plan's lifetimes, so a trace whose real frees
// differ from the planned ones falls back to the caching pool instead of double-booking a chunk.
// When the pool stops being followed (a trace whose iteration numbers go back to the profiled one
// or before), chunks still held by live tensors are set aside ("orphaned") and the pool starts
// empty when it is followed again, so reserved memory counts both until those tensors die.
#include "sim/stalloc_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/error.h"
#include "planner/chunk/chunk_plan.h"

namespace stalloc {

namespace {

constexpr std::uint64_t kTensorAlignment = 512;
constexpr std::uint64_t kSlabMaxRequest = 512;   // the paper serves these from a slab
constexpr std::uint64_t kCacheSmallRequest = 1ull << 20;

std::uint64_t round_up(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b * b; }
std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// Virtual addresses are handed out once and never reused, so no two allocations overlap.
class VirtualSpace {
 public:
  std::uint64_t take(std::uint64_t bytes, std::uint64_t alignment) {
    next_ = round_up(next_, alignment);
    const std::uint64_t at = next_;
    next_ += std::max<std::uint64_t>(bytes, 1);
    return at;
  }

 private:
  std::uint64_t next_ = 1ull << 40;
};

// The paper's fallback: blocks rounded to 512 B; above 1 MiB each block is its own segment
// rounded to the granularity, smaller ones are carved from granularity-sized segments. Free
// blocks are cached and reused best-fit, for requests at least half their size.
class CachingPool {
 public:
  explicit CachingPool(std::uint64_t granularity) : g_(granularity) {}

  // Returns the block address and size, or nullopt when `room` bytes more cannot hold it.
  std::optional<std::pair<std::uint64_t, std::uint64_t>> allocate(std::uint64_t size,
                                                                  std::uint64_t room,
                                                                  VirtualSpace& va,
                                                                  vmm::CallTally* calls) {
    const std::uint64_t want = round_up(std::max<std::uint64_t>(size, 1), kTensorAlignment);
    auto it = free_.lower_bound(want);
    if (it != free_.end() && it->first <= 2 * want) {
      auto block = std::make_pair(it->second.address, it->first);
      free_.erase(it);
      return block;
    }
    if (want <= kCacheSmallRequest) {
      if (segment_used_ + want > g_ || segment_ == 0) {
        if (g_ > room) return std::nullopt;
        segment_ = va.take(g_, g_);
        segment_used_ = 0;
        reserved_ += g_;
        ++(*calls)[vmm::CallKind::CudaMalloc];
      }
      const std::uint64_t at = segment_ + segment_used_;
      segment_used_ += want;
      return std::make_pair(at, want);
    }
    const std::uint64_t bytes = round_up(want, g_);
    if (bytes > room) {
      room += release_cached(calls);
      if (bytes > room) return std::nullopt;
    }
    reserved_ += bytes;
    ++(*calls)[vmm::CallKind::CudaMalloc];
    return std::make_pair(va.take(bytes, g_), bytes);
  }

  void release(std::uint64_t address, std::uint64_t block) {
    free_.emplace(block, Cached{address, block > kCacheSmallRequest});
  }

  // Frees cached segments (blocks above 1 MiB); returns the bytes given back.
  std::uint64_t release_cached(vmm::CallTally* calls) {
    std::uint64_t released = 0;
    for (auto it = free_.begin(); it != free_.end();) {
      if (it->second.own_segment) {
        released += it->first;
        ++(*calls)[vmm::CallKind::CudaFree];
        it = free_.erase(it);
      } else {
        ++it;
      }
    }
    // cudaFree waits for the device; the frees after the first find it idle.
    if (released > 0) ++(*calls)[vmm::CallKind::DeviceSync];
    reserved_ -= released;
    return released;
  }

  std::uint64_t reserved() const { return reserved_; }

 private:
  struct Cached {
    std::uint64_t address;
    bool own_segment;
  };
  std::uint64_t g_;
  std::multimap<std::uint64_t, Cached> free_;
  std::uint64_t segment_ = 0;
  std::uint64_t segment_used_ = 0;
  std::uint64_t reserved_ = 0;
};

// The plan with where each slot's range lies inside the pool's virtual region.
struct PoolPlan {
  ChunkPlan plan;
  std::vector<std::int64_t> slot_at;        // ordinal -> index in plan.slots, -1 if not planned
  std::vector<std::uint64_t> range_offset;  // per slot, offset of its range in the region
  std::uint64_t region_bytes = 0;
};

struct ChunkBytes {
  std::uint32_t chunk;
  std::uint64_t lo;
  std::uint64_t hi;
};

// Planned: bytes of pool chunks at the slot's offset; Chunks: whole pool chunks lent to a
// dynamic tensor.
enum class Source { Planned, Chunks, Slab, Cache };

// What a live allocation holds, to give it back at free.
struct Held {
  Source source = Source::Chunks;
  std::uint64_t size = 0;
  std::uint64_t generation = 0;
  std::vector<ChunkBytes> bytes;           // Planned: pool chunk bytes it occupies
  std::vector<std::uint32_t> pool_chunks;  // Chunks: whole pool chunks lent to it
  std::uint64_t address = 0;
  std::uint64_t block = 0;                 // Cache: block size; Slab: cell
};

class StallocPaperModel final : public AllocatorModel {
 public:
  StallocPaperModel(const Trace& trace, const ModelOptions& options)
      : trace_(trace), options_(options), g_(options.granularity), cache_(options.granularity) {
    if (g_ == 0 || g_ % kTensorAlignment != 0) {
      throw UsageError("the stalloc-paper model needs a granularity that is a positive multiple of 512");
    }
    for (const Lifetime& l : compute_lifetimes(trace_)) {
      if (l.persistent && l.iteration == 0) iteration0_persistent_.insert(l.id);
    }
    std::uint32_t last_iteration = 0;
    for (const Event& e : trace_.events) last_iteration = std::max(last_iteration, e.iteration);
    profile_iteration_ = last_iteration >= 1 ? 1 : 0;
  }

  std::string_view name() const override { return "stalloc-paper"; }

  bool allocate(const Event& e, std::uint64_t* address) override {
    enter_iteration(e.iteration);
    const std::uint64_t ordinal = ordinal_++;
    Held held;
    held.size = e.size;
    held.generation = generation_;
    if (!serve(e, ordinal, held)) return false;
    *address = held.address;
    live_bytes_ += e.size;
    live_.emplace(e.id, std::move(held));
    check_honest();
    return true;
  }

  void deallocate(const Event& e) override {
    auto it = live_.find(e.id);
    if (it == live_.end()) return;
    give_back(it->second);
    live_bytes_ -= it->second.size;
    live_.erase(it);
    check_honest();
  }

  std::uint64_t reserved_bytes() const override {
    return (pool_size_ + orphans_.size() + slab_pages_) * g_ + cache_.reserved();
  }

  vmm::CallTally driver_calls() const override { return calls_; }

 private:
  // ---- iterations and the plan

  void enter_iteration(std::uint32_t iteration) {
    if (current_ && *current_ == iteration) return;
    if (current_) finish_iteration(*current_);
    current_ = iteration;
    ordinal_ = 0;
    fell_back_ = false;
    // The single plan is followed after the profiled iteration.
    const bool follow = plan_ && iteration > profile_iteration_;
    if (follow != following_) switch_plan(follow);
  }

  void finish_iteration(std::uint32_t iteration) {
    if (iteration == profile_iteration_ && !plan_) make_plan(iteration);
  }

  void make_plan(std::uint32_t iteration) {
    PlanOptions options;
    options.mode = PlanMode::Offset;
    options.granularity = g_;
    options.alignment = kTensorAlignment;
    PoolPlan p;
    p.plan = plan_iteration(trace_, iteration, options);
    p.slot_at.assign(p.plan.signature.allocations, -1);
    for (std::size_t i = 0; i < p.plan.slots.size(); ++i) {
      const PlannedSlot& s = p.plan.slots[i];
      p.slot_at[s.ordinal] = static_cast<std::int64_t>(i);
      p.range_offset.push_back(p.region_bytes);
      // Each slot has its own range, a Dynamic slot's as wide as its budget.
      const std::size_t backing = s.kind == SlotKind::Dynamic ? s.budget_chunks.size() : s.chunks.size();
      p.region_bytes += std::max<std::uint64_t>(backing, 1) * g_;
    }
    plan_ = std::move(p);
  }

  // Chunks that live tensors hold are orphaned; the pool starts empty. The pool is one
  // cudaMalloc, made when it is first followed (unless it does not fit under the capacity).
  void switch_plan(bool follow) {
    const std::uint64_t need = follow ? plan_->plan.num_chunks : 0;
    const std::uint64_t grow = need > pool_size_ ? need - pool_size_ : 0;
    if (follow && options_.capacity > 0 && reserved_bytes() + grow * g_ > options_.capacity) follow = false;
    if (follow == following_) return;
    for (const auto& [id, held] : live_) {
      if (held.generation != generation_) continue;
      for (const ChunkBytes& b : held.bytes) ++orphans_[{generation_, b.chunk}];
      for (std::uint32_t c : held.pool_chunks) ++orphans_[{generation_, c}];
    }
    ++generation_;
    following_ = follow;
    if (following_) {
      pool_size_ += grow;
      region_base_ = va_.take(plan_->region_bytes, g_);
      if (grow > 0) ++calls_[vmm::CallKind::CudaMalloc];
      cache_.release_cached(&calls_);
    }
    occupied_.assign(pool_size_, {});
    lent_.assign(pool_size_, false);
  }

  // ---- serving a request

  // The first request that does not match its slot's size sends the rest of the iteration to the
  // caching pool, as the published design gives up on the plan for the iteration.
  bool serve(const Event& e, std::uint64_t ordinal, Held& held) {
    if (e.size <= kSlabMaxRequest) return from_slab(held);
    if (e.iteration == 0 && iteration0_persistent_.count(e.id)) return from_cache(held);
    if (following_ && !fell_back_) {
      const std::int64_t index = ordinal < plan_->slot_at.size() ? plan_->slot_at[ordinal] : -1;
      if (index >= 0) {
        const auto i = static_cast<std::size_t>(index);
        const PlannedSlot& slot = plan_->plan.slots[i];
        if (slot.kind == SlotKind::Dynamic) {
          if (from_budget(slot, held)) return true;
        } else if (slot.size == e.size) {
          if (from_range(i, slot.chunks, slot.offset, slot.size, held)) return true;
        } else {
          fell_back_ = true;
        }
      }
    }
    return from_cache(held);
  }

  // Bytes [offset, offset + size) of the slot's range backed by `chunks`, if no tenant has any.
  bool from_range(std::size_t index, const std::vector<std::uint32_t>& chunks, std::uint64_t offset,
                  std::uint64_t size, Held& held) {
    std::vector<ChunkBytes> bytes;
    for (std::size_t j = offset / g_; j * g_ < offset + size; ++j) {
      const std::uint64_t lo = std::max(offset, j * g_);
      const std::uint64_t hi = std::min(offset + size, (j + 1) * g_);
      ChunkBytes b{chunks[j], lo - j * g_, hi - j * g_};
      if (lent_[b.chunk]) return false;
      for (const auto& [olo, ohi] : occupied_[b.chunk]) {
        if (olo < b.hi && b.lo < ohi) return false;
      }
      bytes.push_back(b);
    }
    for (const ChunkBytes& b : bytes) occupied_[b.chunk].emplace_back(b.lo, b.hi);
    held.source = Source::Planned;
    held.bytes = std::move(bytes);
    held.address = region_base_ + plan_->range_offset[index] + offset;
    return true;
  }

  bool chunk_idle(std::uint32_t c) const { return !lent_[c] && occupied_[c].empty(); }

  // A dynamic tensor takes chunks the plan leaves idle over its slot's lifetime. The published
  // design has no VMM: it needs consecutive pool chunks.
  bool from_budget(const PlannedSlot& slot, Held& held) {
    const std::uint64_t need = ceil_div(std::max<std::uint64_t>(held.size, 1), g_);
    std::vector<std::uint32_t> take;
    for (std::uint32_t c : slot.budget_chunks) {
      if (!chunk_idle(c) || (!take.empty() && c != take.back() + 1)) take.clear();
      if (chunk_idle(c)) take.push_back(c);
      if (take.size() == need) break;
    }
    if (take.size() < need) return false;
    for (std::uint32_t c : take) lent_[c] = true;
    held.source = Source::Chunks;
    held.pool_chunks = std::move(take);
    held.address = va_.take(need * g_, g_);
    return true;
  }

  bool fits(std::uint64_t more_bytes) const {
    return options_.capacity == 0 || reserved_bytes() + more_bytes <= options_.capacity;
  }

  bool from_slab(Held& held) {
    if (slab_free_.empty()) {
      if (!fits(g_)) return false;
      const std::uint64_t page = va_.take(g_, g_);
      for (std::uint64_t cell = g_; cell > 0; cell -= kSlabMaxRequest) {
        slab_free_.push_back(page + cell - kSlabMaxRequest);
      }
      ++slab_pages_;
      ++calls_[vmm::CallKind::CudaMalloc];
    }
    held.source = Source::Slab;
    held.address = slab_free_.back();
    slab_free_.pop_back();
    return true;
  }

  bool from_cache(Held& held) {
    const std::uint64_t room = options_.capacity == 0
                                   ? UINT64_MAX
                                   : options_.capacity - std::min(options_.capacity, reserved_bytes());
    auto block = cache_.allocate(held.size, room, va_, &calls_);
    if (!block) return false;
    held.source = Source::Cache;
    held.address = block->first;
    held.block = block->second;
    return true;
  }

  // ---- giving memory back

  void give_back(const Held& held) {
    if (held.generation != generation_) {
      for (const ChunkBytes& b : held.bytes) drop_orphan(held.generation, b.chunk);
      for (std::uint32_t c : held.pool_chunks) drop_orphan(held.generation, c);
    } else {
      for (const ChunkBytes& b : held.bytes) {
        auto& ranges = occupied_[b.chunk];
        ranges.erase(std::find(ranges.begin(), ranges.end(), std::make_pair(b.lo, b.hi)));
      }
      for (std::uint32_t c : held.pool_chunks) lent_[c] = false;
    }
    switch (held.source) {
      case Source::Slab:
        slab_free_.push_back(held.address);
        break;
      case Source::Cache:
        cache_.release(held.address, held.block);
        break;
      case Source::Planned:
      case Source::Chunks:
        break;
    }
  }

  // An orphaned chunk goes when its last tenant dies, counted as one unmap and one release.
  void drop_orphan(std::uint64_t generation, std::uint32_t chunk) {
    auto it = orphans_.find({generation, chunk});
    if (it != orphans_.end() && --it->second == 0) {
      orphans_.erase(it);
      ++calls_[vmm::CallKind::Unmap];
      ++calls_[vmm::CallKind::Release];
    }
  }

  void check_honest() const {
    if (reserved_bytes() < live_bytes_) {
      throw std::logic_error(std::string(name()) + " model: reserved " +
                             std::to_string(reserved_bytes()) + " bytes below the " +
                             std::to_string(live_bytes_) + " live bytes");
    }
  }

  Trace trace_;
  ModelOptions options_;
  std::uint64_t g_;
  std::unordered_set<std::uint64_t> iteration0_persistent_;
  std::uint32_t profile_iteration_ = 0;

  std::optional<PoolPlan> plan_;
  std::optional<std::uint32_t> current_;
  std::uint64_t ordinal_ = 0;
  bool fell_back_ = false;
  bool following_ = false;

  std::uint64_t generation_ = 0;
  std::uint64_t pool_size_ = 0;
  std::uint64_t region_base_ = 0;
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> occupied_;
  std::vector<bool> lent_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::uint64_t> orphans_;

  std::vector<std::uint64_t> slab_free_;
  std::uint64_t slab_pages_ = 0;
  CachingPool cache_;

  VirtualSpace va_;
  std::unordered_map<std::uint64_t, Held> live_;
  std::uint64_t live_bytes_ = 0;
  vmm::CallTally calls_;
};

}  // namespace

std::unique_ptr<AllocatorModel> make_stalloc_paper_model(const Trace& trace, const ModelOptions& options) {
  return std::make_unique<StallocPaperModel>(trace, options);
}

}  // namespace stalloc
