#include "src/dynamic_arena.h"

#include <algorithm>

namespace stalloc {

DynamicArena::DynamicArena(vmm::Driver& driver, PhysicalMemory& memory, PlanPool& pool,
                           StreamSync& sync)
    : driver_(driver), memory_(memory), pool_(pool), sync_(sync),
      granularity_(memory.granularity()) {}

DynamicArena::~DynamicArena() {
  for (Retiring& r : retiring_) {
    unmap_range(r.base, r.bytes, r.bytes / granularity_);
    sync_.discard(&r.events);
  }
  for (Retiring& r : unretired_) unmap_range(r.base, r.bytes, r.bytes / granularity_);
  for (auto& [base, range] : live_) {
    unmap_range(base, range.bytes, range.backing.size());
    for (Backing& b : range.backing) return_backing(b, 0);
  }
}

void DynamicArena::unmap_range(vmm::DevicePtr base, std::uint64_t bytes, std::size_t mapped) {
  for (std::size_t j = 0; j < mapped; ++j) driver_.unmap(base + j * granularity_, granularity_);
  driver_.free_reservation(base, bytes);
}

void DynamicArena::return_backing(Backing& b, StreamMask used_by) {
  if (b.pooled) {
    ChunkPiece whole{b.pool_chunk, 0, static_cast<std::uint32_t>(granularity_)};
    pool_.vacate({&whole, 1}, used_by);
  } else {
    b.chunk.users |= used_by;
    memory_.give_back(b.chunk);
  }
}

vmm::DevicePtr DynamicArena::allocate(std::uint64_t size, std::uint32_t stream,
                                      const std::vector<std::uint32_t>& budget,
                                      std::string* why) {
  poll();
  const std::uint64_t count = (std::max<std::uint64_t>(size, 1) + granularity_ - 1) / granularity_;
  Range range{size, count * granularity_, {}};
  range.backing.reserve(count);
  StreamMask sync_with = 0;
  std::size_t next_budget = 0;
  while (range.backing.size() < count) {
    Backing b;
    bool found = false;
    while (next_budget < budget.size() && !found) {
      std::uint32_t c = budget[next_budget++];
      ChunkPiece whole{c, 0, static_cast<std::uint32_t>(granularity_)};
      StreamMask users = 0;
      if (c < pool_.size() && pool_.try_occupy({&whole, 1}, &users)) {
        b.pooled = true;
        b.pool_chunk = c;
        b.chunk.handle = pool_.handle(c);
        sync_with |= users;
        found = true;
      }
    }
    if (!found) {
      auto c = memory_.acquire();
      if (!c) break;
      b.chunk = *c;
      sync_with |= c->users;
      b.chunk.users = 0;
    }
    range.backing.push_back(b);
  }
  vmm::DevicePtr base = 0;
  std::size_t mapped = 0;
  bool ok = range.backing.size() == count;
  if (!ok) {
    *why = memory_.last_failure();
  } else if (vmm::Status s = driver_.reserve(&base, range.bytes); s != vmm::Status::Success) {
    *why = "cuMemAddressReserve failed: " + std::string(vmm::status_name(s));
    ok = false;
  } else {
    for (; mapped < count; ++mapped) {
      if (driver_.map(base + mapped * granularity_, granularity_, 0,
                      range.backing[mapped].chunk.handle) != vmm::Status::Success) {
        break;
      }
    }
    ok = mapped == count &&
         driver_.set_access(base, range.bytes, vmm::Access::ReadWrite) == vmm::Status::Success &&
         sync_.order_after(sync_with, stream);
    if (!ok) {
      *why = "mapping a dynamic range failed (live mappings limit?)";
      unmap_range(base, range.bytes, mapped);
    }
  }
  if (!ok) {
    for (Backing& b : range.backing) return_backing(b, sync_with);
    return 0;
  }
  live_bytes_ += size;
  live_.emplace(base, std::move(range));
  return base;
}

bool DynamicArena::free(vmm::DevicePtr ptr, StreamMask used_by) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  Range& range = it->second;
  for (Backing& b : range.backing) return_backing(b, used_by);
  Retiring r{ptr, range.bytes, {}};
  live_bytes_ -= range.size;
  live_.erase(it);
  if (sync_.record(used_by, &r.events)) {
    retiring_.push_back(std::move(r));
  } else {
    // Nothing says when the GPU is done: keep the range mapped rather than unmap it under
    // running kernels; it goes with the arena.
    sync_.discard(&r.events);
    unretired_.push_back(r);
  }
  poll();
  return true;
}

void DynamicArena::poll() {
  while (!retiring_.empty() && sync_.completed(&retiring_.front().events)) {
    Retiring& r = retiring_.front();
    unmap_range(r.base, r.bytes, r.bytes / granularity_);
    retiring_.pop_front();
  }
}

std::vector<DynamicArena::LiveRange> DynamicArena::live_ranges() const {
  std::vector<LiveRange> out;
  out.reserve(live_.size());
  for (const auto& [base, range] : live_) out.push_back({base, range.size, range.bytes});
  return out;
}

}  // namespace stalloc
