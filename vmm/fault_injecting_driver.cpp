#include "vmm/fault_injecting_driver.h"

namespace stalloc::vmm {

void FaultInjectingDriver::fail_nth(std::uint64_t k, CallMask mask, Status status) {
  std::lock_guard lock(mu_);
  armed_mask_ = mask;
  armed_remaining_ = k;
  armed_status_ = status;
}

std::uint64_t FaultInjectingDriver::calls(CallMask mask) const {
  std::lock_guard lock(mu_);
  std::uint64_t n = 0;
  if (intersects(mask, CallMask::Create)) n += create_calls_;
  if (intersects(mask, CallMask::Map)) n += map_calls_;
  if (intersects(mask, CallMask::SetAccess)) n += set_access_calls_;
  if (intersects(mask, CallMask::Reserve)) n += reserve_calls_;
  return n;
}

void FaultInjectingDriver::hold_events(bool held) {
  std::lock_guard lock(mu_);
  events_held_ = held;
}

Status FaultInjectingDriver::event_query(EventHandle event) {
  {
    std::lock_guard lock(mu_);
    if (events_held_) {
      ++held_queries_;
      return Status::NotReady;
    }
  }
  return inner_.event_query(event);
}

std::uint64_t FaultInjectingDriver::held_queries() const {
  std::lock_guard lock(mu_);
  return held_queries_;
}

std::uint64_t FaultInjectingDriver::injected() const {
  std::lock_guard lock(mu_);
  return injected_;
}

bool FaultInjectingDriver::should_fail(CallMask kind, Status* status) {
  std::lock_guard lock(mu_);
  switch (kind) {
    case CallMask::Create: ++create_calls_; break;
    case CallMask::Map: ++map_calls_; break;
    case CallMask::SetAccess: ++set_access_calls_; break;
    case CallMask::Reserve: ++reserve_calls_; break;
    case CallMask::None:
    case CallMask::All: break;
  }
  if (armed_remaining_ == 0 || !intersects(armed_mask_, kind)) return false;
  if (--armed_remaining_ != 0) return false;
  ++injected_;
  *status = armed_status_;
  return true;
}

Status FaultInjectingDriver::create(ChunkHandle* out, std::size_t size) {
  Status failure = Status::Success;
  if (should_fail(CallMask::Create, &failure)) return failure;
  return inner_.create(out, size);
}

Status FaultInjectingDriver::reserve(DevicePtr* out, std::size_t size, std::size_t alignment) {
  Status failure = Status::Success;
  if (should_fail(CallMask::Reserve, &failure)) return failure;
  return inner_.reserve(out, size, alignment);
}

Status FaultInjectingDriver::map(DevicePtr ptr, std::size_t size, std::size_t offset,
                                 ChunkHandle chunk) {
  Status failure = Status::Success;
  if (should_fail(CallMask::Map, &failure)) return failure;
  return inner_.map(ptr, size, offset, chunk);
}

Status FaultInjectingDriver::set_access(DevicePtr ptr, std::size_t size, Access access) {
  Status failure = Status::Success;
  if (should_fail(CallMask::SetAccess, &failure)) return failure;
  return inner_.set_access(ptr, size, access);
}

}  // namespace stalloc::vmm
