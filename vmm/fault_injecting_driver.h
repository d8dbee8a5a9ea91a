// A Driver decorator that makes the k-th call of chosen kinds fail, so tests can drive every
// error path of the code above the driver ("for every k, fail the k-th call, check that nothing
// leaks"). Calls of other kinds, and every call but the chosen one, go to the wrapped driver.
// It can also hold events back (NotReady), standing in for GPU work still running, which the
// host backend never has.
#pragma once

#include <cstdint>
#include <mutex>

#include "vmm/driver.h"

namespace stalloc::vmm {

// Kinds of calls that can be made to fail. Releases, unmaps and frees are not among them: they
// are what cleanup calls, and CUDA does not fail them on valid arguments.
enum class CallMask : std::uint32_t {
  None = 0,
  Create = 1u << 0,
  Map = 1u << 1,
  SetAccess = 1u << 2,
  Reserve = 1u << 3,
  All = Create | Map | SetAccess | Reserve,
};

constexpr CallMask operator|(CallMask a, CallMask b) {
  return static_cast<CallMask>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr bool intersects(CallMask a, CallMask b) {
  return (static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b)) != 0;
}

class FaultInjectingDriver final : public Driver {
 public:
  explicit FaultInjectingDriver(Driver& inner) : inner_(inner) {}

  // Arms one failure: counting from now, the k-th call (1-based) whose kind is in mask returns
  // `status` without reaching the wrapped driver. k = 0 disarms. Replaces an earlier arming.
  void fail_nth(std::uint64_t k, CallMask mask, Status status = Status::OutOfMemory);
  // Calls made so far, since construction, whose kind is in mask (failed ones included).
  std::uint64_t calls(CallMask mask) const;
  // Failures injected so far.
  std::uint64_t injected() const;
  // While held, every event query answers NotReady (and is counted here, not by the inner
  // driver).
  void hold_events(bool held);
  std::uint64_t held_queries() const;

  std::string_view name() const override { return inner_.name(); }
  int device() const override { return inner_.device(); }
  bool host_accessible() const override { return inner_.host_accessible(); }
  Status granularity(std::size_t* out) override { return inner_.granularity(out); }
  Status total_memory(std::size_t* out) override { return inner_.total_memory(out); }
  bool total_memory_enforced() const override { return inner_.total_memory_enforced(); }

  Status create(ChunkHandle* out, std::size_t size) override;
  Status release(ChunkHandle chunk) override { return inner_.release(chunk); }
  Status reserve(DevicePtr* out, std::size_t size, std::size_t alignment = 0) override;
  Status free_reservation(DevicePtr ptr, std::size_t size) override {
    return inner_.free_reservation(ptr, size);
  }
  Status map(DevicePtr ptr, std::size_t size, std::size_t offset, ChunkHandle chunk) override;
  Status unmap(DevicePtr ptr, std::size_t size) override { return inner_.unmap(ptr, size); }
  Status set_access(DevicePtr ptr, std::size_t size, Access access) override;

  Status event_create(EventHandle* out) override { return inner_.event_create(out); }
  Status event_destroy(EventHandle event) override { return inner_.event_destroy(event); }
  Status event_record(EventHandle event, StreamHandle stream) override {
    return inner_.event_record(event, stream);
  }
  Status event_query(EventHandle event) override;
  Status stream_wait_event(StreamHandle stream, EventHandle event) override {
    return inner_.stream_wait_event(stream, event);
  }
  Status accessible_peers(std::vector<int>* out) override { return inner_.accessible_peers(out); }
  Status set_peers(const std::vector<int>& devices) override { return inner_.set_peers(devices); }
  Status synchronize() override { return inner_.synchronize(); }
  Status stream_is_capturing(StreamHandle stream, bool* capturing) override {
    return inner_.stream_is_capturing(stream, capturing);
  }
  Status stream_create(StreamHandle* out) override { return inner_.stream_create(out); }
  Status stream_destroy(StreamHandle stream) override { return inner_.stream_destroy(stream); }
  Status write_bytes(DevicePtr dst, const void* src, std::size_t size) override {
    return inner_.write_bytes(dst, src, size);
  }
  Status read_bytes(void* dst, DevicePtr src, std::size_t size) override {
    return inner_.read_bytes(dst, src, size);
  }
  Status gpu_use(StreamHandle stream, DevicePtr ptr, std::size_t size) override {
    return inner_.gpu_use(stream, ptr, size);
  }

  DriverCounters counters() const override { return inner_.counters(); }
  std::size_t mapping_limit() const override { return inner_.mapping_limit(); }

 private:
  // Counts a call of this kind; true when it is the one to fail.
  bool should_fail(CallMask kind, Status* status);

  Driver& inner_;
  mutable std::mutex mu_;
  std::uint64_t create_calls_ = 0;
  std::uint64_t map_calls_ = 0;
  std::uint64_t set_access_calls_ = 0;
  std::uint64_t reserve_calls_ = 0;
  std::uint64_t injected_ = 0;
  CallMask armed_mask_ = CallMask::None;
  std::uint64_t armed_remaining_ = 0;  // matching calls until the failure; 0: disarmed
  Status armed_status_ = Status::OutOfMemory;
  bool events_held_ = false;
  std::uint64_t held_queries_ = 0;
};

}  // namespace stalloc::vmm
