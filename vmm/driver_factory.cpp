#include "vmm/driver_factory.h"

#include <string>

#include "common/error.h"

#ifdef STALLOC_HAVE_CUDA
#include "vmm/cuda_driver.h"
#endif

namespace stalloc::vmm {
namespace {

std::unique_ptr<Driver> cuda_or_throw([[maybe_unused]] int device) {
#ifdef STALLOC_HAVE_CUDA
  return make_cuda_driver(device);
#else
  throw DriverUnavailable(
      "CUDA backend compiled out (cuda.h was not found at build time): use the host backend "
      "(--backend host)");
#endif
}

}  // namespace

std::unique_ptr<Driver> make_driver(std::string_view backend, const HostDriverOptions& host) {
  if (backend == "host") return make_host_driver(host);
  if (backend == "cuda") return cuda_or_throw(host.device);
  if (backend == "auto") {
    try {
      return cuda_or_throw(host.device);
    } catch (const DriverUnavailable&) {
      return make_host_driver(host);
    }
  }
  throw UsageError("unknown backend '" + std::string(backend) + "': expected host, cuda or auto");
}

}  // namespace stalloc::vmm
