// The driver a runtime runs on, made from its configuration: the one place where
// RuntimeConfig's backend and granularity become a vmm::Driver (the runtime, the PyTorch
// extension and `stalloc replay` all make theirs here).
#pragma once

#include <memory>

#include "src/runtime_config.h"
#include "vmm/driver.h"
#include "vmm/host_driver.h"

namespace stalloc {

// config.backend ("host", "cuda", "auto") for `device`; on the host backend chunks of
// config.granularity (when set) and events that complete after `lag`. Throws
// vmm::DriverUnavailable when the backend cannot be had.
std::unique_ptr<vmm::Driver> make_runtime_driver(const RuntimeConfig& config, int device = 0,
                                                 vmm::HostLag lag = {});

}  // namespace stalloc
