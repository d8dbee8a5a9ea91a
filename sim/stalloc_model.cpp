// The STAlloc models replay a trace the way the runtime serves it (docs/planner.md, "Physical-
// chunk planner"): an iteration whose request sequence has no plan yet is served by a dynamic
// path and planned at its end; later iterations with a compatible plan are served from it.
//
// Physical honesty: every planned request is checked against the bytes of the pool chunks that
// live tensors hold right now, not only against the plan's lifetimes, so a trace whose real frees
// differ from the planned ones falls back to the dynamic path instead of double-booking a chunk.
// When the active plan changes, chunks still held by live tensors are set aside ("orphaned") and
// the new plan gets other chunks, so reserved memory counts both until those tensors die.
#include "sim/stalloc_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "planner/chunk/chunk_plan.h"

namespace stalloc {

namespace {

constexpr std::uint64_t kTensorAlignment = 512;
constexpr std::uint64_t kSlabMaxRequest = 512;   // the paper serves these from a slab
constexpr std::uint64_t kCacheSmallRequest = 1ull << 20;

std::uint64_t round_up(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b * b; }
std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

enum class Variant { Alias, Windowed, Paper };

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

// A cached plan with where each slot's range lies inside the plan's virtual region.
struct CachedPlan {
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

// Chunks: whole pool chunks lent to it and/or chunks created for it alone.
enum class Source { Planned, Chunks, SmallChunk, Persistent, Slab, Cache };

// What a live allocation holds, to give it back at free.
struct Held {
  Source source = Source::Chunks;
  std::uint64_t size = 0;
  std::uint64_t generation = 0;
  std::vector<ChunkBytes> bytes;           // Planned: pool chunk bytes it occupies
  std::vector<std::uint32_t> pool_chunks;  // Chunks: whole pool chunks lent to it
  std::uint64_t fresh_chunks = 0;          // chunks created for it alone
  std::uint64_t small_chunk = 0;           // SmallChunk: which one
  std::uint64_t address = 0;
  std::uint64_t block = 0;                 // Cache: block size; Slab: cell
};

struct SmallChunk {
  std::uint64_t address = 0;
  std::uint64_t used = 0;
  std::uint64_t live = 0;
};

class StallocModel final : public AllocatorModel {
 public:
  StallocModel(const Trace& trace, Variant variant, const ModelOptions& options)
      : trace_(trace), variant_(variant), options_(options), g_(options.granularity),
        cache_(options.granularity) {
    if (g_ == 0 || g_ % kTensorAlignment != 0) {
      throw UsageError("the stalloc models need a granularity that is a positive multiple of 512");
    }
    for (const Lifetime& l : compute_lifetimes(trace_)) {
      if (l.persistent && l.iteration == 0) iteration0_persistent_.insert(l.id);
    }
    for (const Event& e : trace_.events) {
      if (e.kind == EventKind::Alloc) requests_[e.iteration].emplace_back(e.size, e.stream);
      last_iteration_ = std::max(last_iteration_, e.iteration);
    }
    profile_iteration_ = last_iteration_ >= 1 ? 1 : 0;
  }

  std::string_view name() const override {
    switch (variant_) {
      case Variant::Alias: return "stalloc";
      case Variant::Windowed: return "stalloc-windowed";
      case Variant::Paper: return "stalloc-paper";
    }
    return "stalloc";
  }

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
    const std::uint64_t chunks = pool_size_ + orphans_.size() + fresh_chunks_ + small_held_ +
                                 ceil_div(persistent_used_, g_) + slab_pages_;
    return chunks * g_ + cache_.reserved();
  }

  vmm::CallTally driver_calls() const override { return calls_; }

 private:
  // ---- iterations and plans

  void enter_iteration(std::uint32_t iteration) {
    if (current_ && *current_ == iteration) return;
    if (current_) finish_iteration(*current_);
    current_ = iteration;
    ordinal_ = 0;
    fell_back_ = false;
    const std::int64_t next = choose_plan(iteration);
    if (next != active_) switch_plan(next);
    if (active_ >= 0 && variant_ == Variant::Windowed) {
      // Windows map and unmap each view once per iteration.
      const std::uint64_t ops = plans_[static_cast<std::size_t>(active_)].plan.vmm_ops_per_iteration;
      calls_[vmm::CallKind::Map] += ops / 2;
      calls_[vmm::CallKind::Unmap] += ops - ops / 2;
    }
  }

  void finish_iteration(std::uint32_t iteration) {
    if (variant_ == Variant::Paper) {
      if (iteration == profile_iteration_ && plans_.empty()) add_plan(iteration, PlanMode::Offset);
      return;
    }
    if (active_ >= 0 || planned_.count(iteration)) return;
    const TraceSignature sig = signature_of(trace_, iteration);
    for (const CachedPlan& p : plans_) {
      if (p.plan.signature == sig) return;
    }
    add_plan(iteration, variant_ == Variant::Windowed ? PlanMode::Windowed : PlanMode::Alias);
  }

  void add_plan(std::uint32_t iteration, PlanMode mode) {
    planned_.insert(iteration);
    PlanOptions options;
    options.mode = mode;
    options.granularity = g_;
    options.alignment = kTensorAlignment;
    CachedPlan cached;
    cached.plan = plan_iteration(trace_, iteration, options);
    cached.slot_at.assign(cached.plan.signature.allocations, -1);
    for (std::size_t i = 0; i < cached.plan.slots.size(); ++i) {
      const PlannedSlot& s = cached.plan.slots[i];
      cached.slot_at[s.ordinal] = static_cast<std::int64_t>(i);
      cached.range_offset.push_back(cached.region_bytes);
      // A Dynamic slot's range is mapped on its budget.
      const std::size_t backing = s.kind == SlotKind::Dynamic ? s.budget_chunks.size() : s.chunks.size();
      cached.region_bytes += std::max<std::uint64_t>(backing, 1) * g_;
    }
    plans_.push_back(std::move(cached));
  }

  // A plan serves an iteration with as many allocations whose planned slots agree on size and
  // stream (dynamic slots on the stream only). The paper's single plan is used after profiling.
  std::int64_t choose_plan(std::uint32_t iteration) const {
    if (variant_ == Variant::Paper) {
      return !plans_.empty() && iteration > profile_iteration_ ? 0 : -1;
    }
    auto found = requests_.find(iteration);
    if (found == requests_.end()) return -1;
    const auto& reqs = found->second;
    for (std::size_t p = 0; p < plans_.size(); ++p) {
      const ChunkPlan& plan = plans_[p].plan;
      if (plan.signature.allocations != reqs.size()) continue;
      const bool fits = std::all_of(plan.slots.begin(), plan.slots.end(), [&](const PlannedSlot& s) {
        const auto& [size, stream] = reqs[s.ordinal];
        return stream == s.stream && (s.kind == SlotKind::Dynamic || size == s.size);
      });
      if (fits) return static_cast<std::int64_t>(p);
    }
    return -1;
  }

  // Chunks that live tensors hold are orphaned; the pool starts empty for the new plan.
  void switch_plan(std::int64_t next) {
    if (next >= 0) {
      const std::uint64_t need = plans_[static_cast<std::size_t>(next)].plan.num_chunks;
      const std::uint64_t grow = need > pool_size_ ? need - pool_size_ : 0;
      if (options_.capacity > 0 && reserved_bytes() + grow * g_ > options_.capacity) next = -1;
    }
    if (next == active_) return;
    for (const auto& [id, held] : live_) {
      if (held.generation != generation_) continue;
      for (const ChunkBytes& b : held.bytes) ++orphans_[{generation_, b.chunk}];
      for (std::uint32_t c : held.pool_chunks) ++orphans_[{generation_, c}];
    }
    ++generation_;
    active_ = next;
    if (active_ >= 0) {
      const CachedPlan& cached = plans_[static_cast<std::size_t>(active_)];
      const std::uint64_t grow = cached.plan.num_chunks > pool_size_ ? cached.plan.num_chunks - pool_size_ : 0;
      pool_size_ += grow;
      region_base_ = va_.take(cached.region_bytes, g_);
      if (variant_ == Variant::Paper) {
        // One static pool, one cudaMalloc.
        if (grow > 0) ++calls_[vmm::CallKind::CudaMalloc];
        cache_.release_cached(&calls_);
      } else {
        calls_[vmm::CallKind::Create] += grow;
        calls_[vmm::CallKind::Map] += cached.plan.mappings;
        calls_[vmm::CallKind::Reserve] += cached.plan.slots.size();
        calls_[vmm::CallKind::SetAccess] += cached.plan.slots.size();
      }
    }
    occupied_.assign(pool_size_, {});
    lent_.assign(pool_size_, false);
    spare_.clear();
    for (std::uint64_t c = pool_size_; c > 0; --c) spare_.push_back(static_cast<std::uint32_t>(c - 1));
  }

  // ---- serving a request

  bool serve(const Event& e, std::uint64_t ordinal, Held& held) {
    if (variant_ == Variant::Paper && e.size <= kSlabMaxRequest) return from_slab(held);
    if (e.iteration == 0 && iteration0_persistent_.count(e.id)) {
      return variant_ == Variant::Paper ? from_cache(held) : from_persistent(held);
    }
    if (active_ >= 0 && !fell_back_) {
      const CachedPlan& cached = plans_[static_cast<std::size_t>(active_)];
      const std::int64_t index = ordinal < cached.slot_at.size() ? cached.slot_at[ordinal] : -1;
      if (index >= 0) {
        const auto i = static_cast<std::size_t>(index);
        const PlannedSlot& slot = cached.plan.slots[i];
        const bool stream_ok = variant_ == Variant::Paper || slot.stream == e.stream;
        if (slot.kind == SlotKind::Dynamic && stream_ok) {
          if (variant_ != Variant::Paper && from_budget_view(cached, i, held)) return true;
          if (from_budget(slot, held)) return true;
        } else if (slot.size == e.size && stream_ok) {
          if (from_slot(cached, i, held)) return true;
        } else if (variant_ == Variant::Paper) {
          fell_back_ = true;  // the published design gives up on the plan for the iteration
        }
      }
    }
    return variant_ == Variant::Paper ? from_cache(held) : from_dynamic(held);
  }

  bool from_slot(const CachedPlan& cached, std::size_t index, Held& held) {
    const PlannedSlot& slot = cached.plan.slots[index];
    return from_range(cached, index, slot.chunks, slot.offset, slot.size, held);
  }

  // As the runtime: a Dynamic tensor takes bytes of the range mapped on its slot's budget, from
  // the first page at which they are free.
  bool from_budget_view(const CachedPlan& cached, std::size_t index, Held& held) {
    const PlannedSlot& slot = cached.plan.slots[index];
    const std::uint64_t pages = slot.budget_chunks.size();
    const std::uint64_t needed = ceil_div(slot.offset + held.size, g_);
    if (held.size == 0 || needed > pages) return false;
    for (std::uint64_t start = 0; start + needed <= pages; ++start) {
      if (from_range(cached, index, slot.budget_chunks, slot.offset + start * g_, held.size, held)) {
        return true;
      }
    }
    return false;
  }

  // Bytes [offset, offset + size) of the slot's range backed by `chunks`, if no tenant has any.
  bool from_range(const CachedPlan& cached, std::size_t index,
                  const std::vector<std::uint32_t>& chunks, std::uint64_t offset,
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
    held.address = region_base_ + cached.range_offset[index] + offset;
    return true;
  }

  bool chunk_idle(std::uint32_t c) const { return !lent_[c] && occupied_[c].empty(); }

  // A dynamic slot grows onto chunks the plan leaves idle over its lifetime; below a chunk it is
  // packed with other small requests instead of taking a chunk alone. The published design has
  // no VMM: it needs consecutive pool chunks.
  bool from_budget(const PlannedSlot& slot, Held& held) {
    if (variant_ != Variant::Paper && held.size < g_) return from_small_chunk(held);
    const std::uint64_t need = ceil_div(std::max<std::uint64_t>(held.size, 1), g_);
    std::vector<std::uint32_t> take;
    if (variant_ == Variant::Paper) {
      for (std::uint32_t c : slot.budget_chunks) {
        if (!chunk_idle(c) || (!take.empty() && c != take.back() + 1)) take.clear();
        if (chunk_idle(c)) take.push_back(c);
        if (take.size() == need) break;
      }
      if (take.size() < need) return false;
    } else {
      for (std::uint32_t c : slot.budget_chunks) {
        if (take.size() == need) break;
        if (chunk_idle(c)) take.push_back(c);
      }
      if (!fresh(need - take.size(), held)) return false;
    }
    for (std::uint32_t c : take) lent_[c] = true;
    held.source = Source::Chunks;
    held.pool_chunks = std::move(take);
    held.address = va_.take(need * g_, g_);
    return true;
  }

  // New chunks created and mapped, access set once over them; unmapped and released.
  void count_mapped(std::uint64_t chunks) {
    if (chunks == 0) return;
    calls_[vmm::CallKind::Create] += chunks;
    calls_[vmm::CallKind::Map] += chunks;
    ++calls_[vmm::CallKind::SetAccess];
  }
  void count_unmapped(std::uint64_t chunks) {
    calls_[vmm::CallKind::Unmap] += chunks;
    calls_[vmm::CallKind::Release] += chunks;
  }

  bool fits(std::uint64_t more_bytes) const {
    return options_.capacity == 0 || reserved_bytes() + more_bytes <= options_.capacity;
  }

  bool fresh(std::uint64_t chunks, Held& held) {
    if (!fits(chunks * g_)) return false;
    fresh_chunks_ += chunks;
    held.fresh_chunks = chunks;
    count_mapped(chunks);
    return true;
  }

  // Chunk-granular: whole chunks for large requests (idle pool chunks first, when no plan is
  // active), small requests packed into shared chunks.
  bool from_dynamic(Held& held) {
    if (held.size < g_) return from_small_chunk(held);
    const std::uint64_t need = ceil_div(held.size, g_);
    std::vector<std::uint32_t> take;
    if (active_ < 0) {
      while (take.size() < need && !spare_.empty()) {
        const std::uint32_t c = spare_.back();
        spare_.pop_back();
        if (chunk_idle(c)) take.push_back(c);
      }
    }
    if (!fresh(need - take.size(), held)) {
      for (std::uint32_t c : take) spare_.push_back(c);
      return false;
    }
    for (std::uint32_t c : take) lent_[c] = true;
    held.source = Source::Chunks;
    held.pool_chunks = std::move(take);
    held.address = va_.take(need * g_, g_);
    return true;
  }

  bool from_small_chunk(Held& held) {
    const std::uint64_t bytes = round_up(std::max<std::uint64_t>(held.size, 1), kTensorAlignment);
    if (small_.empty() || small_[current_small_].used + bytes > g_) {
      if (!fits(g_)) return false;
      current_small_ = small_.size();
      small_.push_back({va_.take(g_, g_), 0, 0});
      ++small_held_;
      count_mapped(1);
    }
    SmallChunk& chunk = small_[current_small_];
    held.source = Source::SmallChunk;
    held.small_chunk = current_small_;
    held.address = chunk.address + chunk.used;
    chunk.used += bytes;
    ++chunk.live;
    return true;
  }

  bool from_persistent(Held& held) {
    const std::uint64_t at = round_up(persistent_used_, kTensorAlignment);
    const std::uint64_t grow = ceil_div(at + held.size, g_) - ceil_div(persistent_used_, g_);
    if (!fits(grow * g_)) return false;
    count_mapped(grow);
    persistent_used_ = at + held.size;
    held.source = Source::Persistent;
    held.address = kPersistentBase + at;
    return true;
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
      for (std::uint32_t c : held.pool_chunks) {
        lent_[c] = false;
        if (active_ < 0) spare_.push_back(c);
      }
    }
    fresh_chunks_ -= held.fresh_chunks;
    count_unmapped(held.fresh_chunks);
    switch (held.source) {
      case Source::SmallChunk: {
        SmallChunk& chunk = small_[held.small_chunk];
        if (--chunk.live == 0) {
          if (held.small_chunk == current_small_) {
            chunk.used = 0;  // the current chunk is reused from its start
          } else {
            --small_held_;
            count_unmapped(1);
          }
        }
        break;
      }
      case Source::Slab:
        slab_free_.push_back(held.address);
        break;
      case Source::Cache:
        cache_.release(held.address, held.block);
        break;
      case Source::Planned:
      case Source::Chunks:
      case Source::Persistent:
        break;
    }
  }

  void drop_orphan(std::uint64_t generation, std::uint32_t chunk) {
    auto it = orphans_.find({generation, chunk});
    if (it != orphans_.end() && --it->second == 0) {
      orphans_.erase(it);
      count_unmapped(1);
    }
  }

  void check_honest() const {
    if (reserved_bytes() < live_bytes_) {
      throw std::logic_error(std::string(name()) + " model: reserved " +
                             std::to_string(reserved_bytes()) + " bytes below the " +
                             std::to_string(live_bytes_) + " live bytes");
    }
  }

  static constexpr std::uint64_t kPersistentBase = 1ull << 60;

  Trace trace_;
  Variant variant_;
  ModelOptions options_;
  std::uint64_t g_;
  std::unordered_set<std::uint64_t> iteration0_persistent_;
  std::map<std::uint32_t, std::vector<std::pair<std::uint64_t, std::uint32_t>>> requests_;
  std::uint32_t last_iteration_ = 0;
  std::uint32_t profile_iteration_ = 0;

  std::vector<CachedPlan> plans_;
  std::set<std::uint32_t> planned_;
  std::optional<std::uint32_t> current_;
  std::uint64_t ordinal_ = 0;
  bool fell_back_ = false;
  std::int64_t active_ = -1;

  std::uint64_t generation_ = 0;
  std::uint64_t pool_size_ = 0;
  std::uint64_t region_base_ = 0;
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> occupied_;
  std::vector<bool> lent_;
  std::vector<std::uint32_t> spare_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::uint64_t> orphans_;

  std::uint64_t fresh_chunks_ = 0;
  std::vector<SmallChunk> small_;
  std::size_t current_small_ = 0;
  std::uint64_t small_held_ = 0;
  std::uint64_t persistent_used_ = 0;
  std::vector<std::uint64_t> slab_free_;
  std::uint64_t slab_pages_ = 0;
  CachingPool cache_;

  VirtualSpace va_;
  std::unordered_map<std::uint64_t, Held> live_;
  std::uint64_t live_bytes_ = 0;
  vmm::CallTally calls_;
};

}  // namespace

std::unique_ptr<AllocatorModel> make_stalloc_model(const Trace& trace, std::string_view variant,
                                                   const ModelOptions& options) {
  if (variant == "stalloc") return std::make_unique<StallocModel>(trace, Variant::Alias, options);
  if (variant == "stalloc-windowed") {
    return std::make_unique<StallocModel>(trace, Variant::Windowed, options);
  }
  if (variant == "stalloc-paper") return std::make_unique<StallocModel>(trace, Variant::Paper, options);
  throw UsageError("unknown stalloc model '" + std::string(variant) +
                   "' (known: stalloc, stalloc-windowed, stalloc-paper)");
}

}  // namespace stalloc
