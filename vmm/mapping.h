// Owns one mapped range (one cuMemMap call) and unmaps it on destruction. The mapping refers to
// its chunk by handle only: the chunk may be released while mapped.
#pragma once

#include <cstddef>
#include <utility>

#include "vmm/driver.h"

namespace stalloc::vmm {

class Mapping {
 public:
  Mapping() = default;

  // Maps [offset, offset + size) of chunk at ptr.
  static Status map(Driver& driver, DevicePtr ptr, std::size_t size, std::size_t offset,
                    ChunkHandle chunk, Mapping* out) {
    const Status s = driver.map(ptr, size, offset, chunk);
    if (s == Status::Success) *out = Mapping(driver, ptr, size);
    return s;
  }

  Mapping(Mapping&& other) noexcept
      : driver_(std::exchange(other.driver_, nullptr)), ptr_(other.ptr_), size_(other.size_) {}
  Mapping& operator=(Mapping&& other) noexcept {
    if (this != &other) {
      reset();
      driver_ = std::exchange(other.driver_, nullptr);
      ptr_ = other.ptr_;
      size_ = other.size_;
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { reset(); }

  explicit operator bool() const { return driver_ != nullptr; }
  DevicePtr ptr() const { return ptr_; }
  std::size_t size() const { return size_; }

  // Grants access over the whole mapped range.
  Status set_access(Access access) const {
    return driver_ == nullptr ? Status::InvalidValue : driver_->set_access(ptr_, size_, access);
  }

  // Unmaps now; the object is then empty.
  Status reset() {
    if (driver_ == nullptr) return Status::Success;
    return std::exchange(driver_, nullptr)->unmap(ptr_, size_);
  }

 private:
  Mapping(Driver& driver, DevicePtr ptr, std::size_t size)
      : driver_(&driver), ptr_(ptr), size_(size) {}

  Driver* driver_ = nullptr;
  DevicePtr ptr_ = 0;
  std::size_t size_ = 0;
};

}  // namespace stalloc::vmm
