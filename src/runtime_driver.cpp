#include "src/runtime_driver.h"

#include "vmm/driver_factory.h"

namespace stalloc {

std::unique_ptr<vmm::Driver> make_runtime_driver(const RuntimeConfig& config, int device,
                                                 vmm::HostLag lag) {
  vmm::HostDriverOptions host;
  if (config.granularity != 0) host.granularity = config.granularity;
  host.device = device;
  host.lag = lag;
  return vmm::make_driver(config.backend, host);
}

}  // namespace stalloc
