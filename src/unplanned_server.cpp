#include "src/unplanned_server.h"

#include <algorithm>

namespace stalloc {
namespace {

// A stream's packed arenas, at kArenaKinds * stream + kind.
constexpr std::size_t kSmallArena = 0;
constexpr std::size_t kLargeArena = 1;
constexpr std::size_t kOnlineArena = 2;  // large requests before the first plan, online_page pages
constexpr std::size_t kArenaKinds = 3;

}  // namespace

UnplannedServer::UnplannedServer(const RuntimeConfig& config, std::uint64_t granularity,
                                 vmm::Driver& driver, PhysicalMemory& memory, PlanPool& pool,
                                 StreamSync& sync, Reclaimer& reclaimer, std::uint64_t device_bytes)
    : config_(config),
      granularity_(granularity),
      driver_(driver),
      memory_(memory),
      sync_(sync),
      reclaimer_(reclaimer),
      device_bytes_(device_bytes),
      lender_(pool, reclaimer),
      dedicated_(driver, memory, sync, reclaimer) {}

SubAllocator& UnplannedServer::choose(std::uint64_t size, std::uint32_t stream, bool following,
                                      bool planned) {
  const std::uint64_t rounded = (size + granularity_ - 1) / granularity_ * granularity_;
  const bool dedicated = !following && config_.large_size != 0 && size >= config_.large_size &&
                         (rounded - size) * config_.policy.dedicated_waste_share <= size;
  if (dedicated) return dedicated_;
  return arena(stream, size, planned);
}

PackedArena& UnplannedServer::arena(std::uint32_t stream, std::uint64_t size, bool planned) {
  const bool small_request = size <= config_.small_size;
  // Small requests get pages of their own, so that short-lived small tensors do not pin the
  // pages of large ones, only once the runtime holds small_apart_bytes.
  const bool small = small_request && memory_.reserved_bytes() >= config_.policy.small_apart_bytes;
  // online_page set: before any plan is installed (nothing is lent from a pool then), large
  // requests take pages of online_page bytes, one chunk made and mapped per page, where pages
  // of the granularity make a cuMemCreate and a cuMemMap every 2 MiB of a workload served
  // online. Off by default: the partly used pages cost small workloads memory.
  const std::uint64_t page_granules = std::max<std::uint64_t>(config_.online_page / granularity_, 1);
  const bool online = !small_request && page_granules > 1 && !planned;
  const std::size_t kind = small ? kSmallArena : online ? kOnlineArena : kLargeArena;
  const std::size_t index = kArenaKinds * std::size_t{stream} + kind;
  if (packed_.size() <= index) packed_.resize(index + 1);
  if (!packed_[index]) {
    const RuntimePolicy& policy = config_.policy;
    packed_[index] = std::make_unique<PackedArena>(
        driver_, memory_, sync_,
        reservation(small ? policy.small_arena_bytes : policy.large_arena_bytes),
        stream, policy.arena_idle_bytes, &lender_, reclaimer_, online ? page_granules : 1,
        ArenaExtents{std::max<std::uint64_t>(config_.extent_size / granularity_, 1),
                     policy.extent_held_share});
  }
  return *packed_[index];
}

std::uint64_t UnplannedServer::reservation(std::uint64_t policy_bytes) const {
  const std::uint64_t limit = memory_.capacity() != 0 ? memory_.capacity() : device_bytes_;
  if (limit == 0) return policy_bytes;
  const std::uint64_t share = config_.policy.arena_limit_share;
  const std::uint64_t wanted = limit > policy_bytes / share ? policy_bytes : limit * share;
  const std::uint64_t at_least = std::uint64_t{1} << 30;
  const std::uint64_t bytes = std::min(policy_bytes, std::max(wanted, at_least));
  return (bytes + granularity_ - 1) / granularity_ * granularity_;
}

std::optional<UnplannedServer::Block> UnplannedServer::free(vmm::DevicePtr address,
                                                            bool* done) {
  auto it = live_.find(address);
  if (it == live_.end()) return std::nullopt;
  const Block block = it->second;
  live_.erase(it);
  *done = block.by->free(address, block.used_by);
  return block;
}

bool UnplannedServer::record_stream(vmm::DevicePtr address, StreamMask stream) {
  auto it = live_.find(address);
  if (it == live_.end()) return false;
  it->second.used_by |= stream;
  return true;
}

void UnplannedServer::poll() {
  for (const auto& arena : packed_) {
    if (arena) arena->poll();
  }
}

std::uint64_t UnplannedServer::release_idle() {
  std::uint64_t released = dedicated_.release_cached();
  for (const auto& arena : packed_) {
    if (arena) released += arena->release_idle();
  }
  return released;
}

std::uint64_t UnplannedServer::give_idle_pages(std::uint64_t bytes) {
  std::uint64_t given = 0;
  for (bool more = true; more && given < bytes;) {
    more = false;
    for (const auto& arena : packed_) {
      if (!arena || given >= bytes) continue;
      const std::uint64_t freed = arena->give_idle_chunk();
      given += freed;
      more = more || freed > 0;
    }
  }
  return given;
}

bool UnplannedServer::give_idle_page_to(const PackedArena* asking) {
  for (const auto& other : packed_) {
    if (other && other.get() != asking && other->give_idle_chunk() > 0) return true;
  }
  return false;
}

std::uint64_t UnplannedServer::emptied_bytes() const {
  std::uint64_t bytes = 0;
  for (const auto& arena : packed_) {
    if (arena) bytes += arena->emptied_bytes();
  }
  return bytes;
}

bool UnplannedServer::unmaps_pending() const {
  return std::any_of(packed_.begin(), packed_.end(),
                     [](const auto& arena) { return arena && arena->unmaps_pending(); });
}

std::uint64_t UnplannedServer::held_beside_plans() const {
  std::uint64_t beside = dedicated_.live_range_bytes();
  for (const auto& arena : packed_) {
    if (arena) beside += arena->occupied_own_pages() * arena->page_bytes();
  }
  return beside;
}

std::uint64_t UnplannedServer::packed_live_bytes() const {
  std::uint64_t bytes = 0;
  for (const auto& arena : packed_) {
    if (arena) bytes += arena->live_bytes();
  }
  return bytes;
}

void UnplannedServer::append_segments(const StreamSync& sync,
                                      std::vector<SnapshotSegment>* segments) const {
  for (std::size_t index = 0; index < packed_.size(); ++index) {
    if (!packed_[index]) continue;
    const auto stream = static_cast<std::uint32_t>(index / kArenaKinds);
    for (const PackedArena::Run& run : packed_[index]->runs()) {
      SnapshotSegment seg;
      seg.address = run.base;
      seg.total_size = run.bytes;
      seg.stream = stream < sync.streams() ? sync.handle_of(stream) : 0;
      seg.small = index % kArenaKinds == kSmallArena;
      for (const PackedArena::Block& b : run.blocks) {
        seg.blocks.push_back({b.address, b.bytes, b.size, true});
      }
      segments->push_back(std::move(seg));
    }
  }
}

}  // namespace stalloc
