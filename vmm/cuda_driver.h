// The CUDA backend: forwards every Driver call to the CUDA driver API. libcuda is opened at run
// time (dlopen + cuGetProcAddress), so the same binary runs on machines without a GPU, where
// make_cuda_driver throws and callers fall back to the host backend.
#pragma once

#include <memory>

#include "vmm/driver.h"

namespace stalloc::vmm {

// Throws DriverUnavailable when libcuda cannot be loaded, has no usable device, or device is
// out of range.
std::unique_ptr<Driver> make_cuda_driver(int device);

}  // namespace stalloc::vmm
