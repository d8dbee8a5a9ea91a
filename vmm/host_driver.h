// The host backend: CUDA's virtual memory management emulated with Linux memory mappings, so the
// allocator runs, and is tested, on machines without a GPU. See docs/vmm.md for the rules it
// enforces.
#pragma once

#include <cstddef>
#include <memory>

#include "vmm/driver.h"

namespace stalloc::vmm {

struct HostDriverOptions {
  // Chunk, reservation and mapping granularity: a power of two and a multiple of the page size.
  std::size_t granularity = 2 << 20;
  // Most live mappings; 0: as many as the kernel's memory areas allow (vm.max_map_count, less
  // the areas the process already has and a margin of 1024).
  std::size_t max_mappings = 0;
  // Most physical bytes created at once; 0: unlimited. Past it create() returns OutOfMemory.
  std::size_t max_bytes = 0;
  int device = 0;
};

// Throws DriverUnavailable for options it cannot honour (granularity not a power of two, or not
// a multiple of the page size).
std::unique_ptr<Driver> make_host_driver(const HostDriverOptions& options = {});

}  // namespace stalloc::vmm
