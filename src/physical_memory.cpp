#include "src/physical_memory.h"

#include "common/units.h"

namespace stalloc {

PhysicalMemory::PhysicalMemory(vmm::Driver& driver, std::uint64_t granularity,
                               std::uint64_t capacity)
    : driver_(driver), granularity_(granularity), capacity_(capacity) {}

PhysicalMemory::~PhysicalMemory() { trim(); }

std::optional<Chunk> PhysicalMemory::take_cached() {
  if (cache_.empty()) return std::nullopt;
  Chunk c = cache_.back();
  cache_.pop_back();
  return c;
}

std::optional<Chunk> PhysicalMemory::acquire() {
  if (auto cached = take_cached()) return cached;
  if (capacity_ != 0 && (held_ + 1) * granularity_ > capacity_) {
    last_failure_ = "capacity " + format_bytes(capacity_) + " reached (" +
                    format_bytes(reserved_bytes()) + " reserved)";
    return std::nullopt;
  }
  Chunk c;
  vmm::Status s = driver_.create(&c.handle, granularity_);
  if (s != vmm::Status::Success) {
    last_failure_ = "cuMemCreate failed: " + std::string(vmm::status_name(s)) + " (" +
                    format_bytes(reserved_bytes()) + " reserved)";
    return std::nullopt;
  }
  ++held_;
  if (held_ > peak_held_) peak_held_ = held_;
  if (held_ > high_water_) high_water_ = held_;
  return c;
}

void PhysicalMemory::give_back(Chunk chunk) { cache_.push_back(chunk); }

std::optional<Chunk> PhysicalMemory::acquire_dedicated(std::uint64_t granules) {
  if (capacity_ != 0 && (held_ + granules) * granularity_ > capacity_) {
    // Cached chunks of the granularity would make room.
    trim();
    if ((held_ + granules) * granularity_ > capacity_) {
      last_failure_ = "capacity " + format_bytes(capacity_) + " reached (" +
                      format_bytes(reserved_bytes()) + " reserved)";
      return std::nullopt;
    }
  }
  Chunk c;
  vmm::Status s = driver_.create(&c.handle, granules * granularity_);
  if (s != vmm::Status::Success) {
    last_failure_ = "cuMemCreate failed: " + std::string(vmm::status_name(s)) + " (" +
                    format_bytes(reserved_bytes()) + " reserved)";
    return std::nullopt;
  }
  held_ += granules;
  if (held_ > peak_held_) peak_held_ = held_;
  if (held_ > high_water_) high_water_ = held_;
  return c;
}

void PhysicalMemory::release_dedicated(const Chunk& chunk, std::uint64_t granules) {
  driver_.release(chunk.handle);
  held_ -= granules;
}

void PhysicalMemory::trim() {
  for (const Chunk& c : cache_) {
    driver_.release(c.handle);
    --held_;
  }
  cache_.clear();
}

bool PhysicalMemory::can_hold(std::uint64_t count) const {
  if (capacity_ == 0) return true;
  std::uint64_t extra = count > cache_.size() ? count - cache_.size() : 0;
  return (held_ + extra) * granularity_ <= capacity_;
}

}  // namespace stalloc
