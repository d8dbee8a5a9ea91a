// Owns one reserved virtual address range (cuMemAddressReserve) and frees it on destruction.
// Whatever is mapped inside must be unmapped first: declare the Mappings after the reservation
// so they are destroyed before it.
#pragma once

#include <cstddef>
#include <utility>

#include "vmm/driver.h"

namespace stalloc::vmm {

class VaReservation {
 public:
  VaReservation() = default;

  // alignment 0 means the granularity.
  static Status reserve(Driver& driver, std::size_t size, std::size_t alignment,
                        VaReservation* out) {
    DevicePtr ptr = 0;
    const Status s = driver.reserve(&ptr, size, alignment);
    if (s == Status::Success) *out = VaReservation(driver, ptr, size);
    return s;
  }

  VaReservation(VaReservation&& other) noexcept
      : driver_(std::exchange(other.driver_, nullptr)), base_(other.base_), size_(other.size_) {}
  VaReservation& operator=(VaReservation&& other) noexcept {
    if (this != &other) {
      reset();
      driver_ = std::exchange(other.driver_, nullptr);
      base_ = other.base_;
      size_ = other.size_;
    }
    return *this;
  }
  VaReservation(const VaReservation&) = delete;
  VaReservation& operator=(const VaReservation&) = delete;
  ~VaReservation() { reset(); }

  explicit operator bool() const { return driver_ != nullptr; }
  DevicePtr base() const { return base_; }
  std::size_t size() const { return size_; }

  // Frees the range now; the object is then empty (also when the driver refuses).
  Status reset() {
    if (driver_ == nullptr) return Status::Success;
    return std::exchange(driver_, nullptr)->free_reservation(base_, size_);
  }

 private:
  VaReservation(Driver& driver, DevicePtr base, std::size_t size)
      : driver_(&driver), base_(base), size_(size) {}

  Driver* driver_ = nullptr;
  DevicePtr base_ = 0;
  std::size_t size_ = 0;
};

}  // namespace stalloc::vmm
