// The exception for a driver call that failed where the caller cannot return a Status (a
// constructor): it keeps the CUDA code so callers can tell out-of-memory from misuse.
#pragma once

#include <stdexcept>
#include <string>

#include "vmm/driver.h"

namespace stalloc::vmm {

class VmmError : public std::runtime_error {
 public:
  VmmError(const std::string& what, Status status)
      : std::runtime_error(what + ": " + std::string(status_name(status))), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

}  // namespace stalloc::vmm
