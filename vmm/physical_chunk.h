// Owns one physical allocation (a cuMemCreate handle) and releases it on destruction. Releasing
// a chunk that is still mapped is allowed: the memory goes with its last mapping.
#pragma once

#include <cstddef>
#include <utility>

#include "vmm/driver.h"

namespace stalloc::vmm {

class PhysicalChunk {
 public:
  PhysicalChunk() = default;
  // Takes ownership of a handle created on driver.
  PhysicalChunk(Driver& driver, ChunkHandle handle, std::size_t size)
      : driver_(&driver), handle_(handle), size_(size) {}

  static Status create(Driver& driver, std::size_t size, PhysicalChunk* out) {
    ChunkHandle handle = 0;
    const Status s = driver.create(&handle, size);
    if (s == Status::Success) *out = PhysicalChunk(driver, handle, size);
    return s;
  }

  PhysicalChunk(PhysicalChunk&& other) noexcept
      : driver_(std::exchange(other.driver_, nullptr)),
        handle_(other.handle_),
        size_(other.size_) {}
  PhysicalChunk& operator=(PhysicalChunk&& other) noexcept {
    if (this != &other) {
      reset();
      driver_ = std::exchange(other.driver_, nullptr);
      handle_ = other.handle_;
      size_ = other.size_;
    }
    return *this;
  }
  PhysicalChunk(const PhysicalChunk&) = delete;
  PhysicalChunk& operator=(const PhysicalChunk&) = delete;
  ~PhysicalChunk() { reset(); }

  explicit operator bool() const { return driver_ != nullptr; }
  ChunkHandle handle() const { return handle_; }
  std::size_t size() const { return size_; }

  // Releases the chunk now; the object is then empty.
  Status reset() {
    if (driver_ == nullptr) return Status::Success;
    return std::exchange(driver_, nullptr)->release(handle_);
  }

 private:
  Driver* driver_ = nullptr;
  ChunkHandle handle_ = 0;
  std::size_t size_ = 0;
};

}  // namespace stalloc::vmm
