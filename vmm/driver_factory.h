// Picks a backend by name, as the command line and the PyTorch extension spell it.
#pragma once

#include <memory>
#include <string_view>

#include "vmm/driver.h"
#include "vmm/host_driver.h"

namespace stalloc::vmm {

// backend: "host", "cuda" or "auto" (cuda when it loads, else host). Throws DriverUnavailable
// when "cuda" cannot be had (compiled out, no libcuda, no device) and UsageError for another name.
// The CUDA backend uses host.device as its device.
std::unique_ptr<Driver> make_driver(std::string_view backend, const HostDriverOptions& host = {});

}  // namespace stalloc::vmm
