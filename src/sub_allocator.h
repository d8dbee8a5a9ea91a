// What serves the requests no plan takes: a packed arena (small and mid-sized tensors packed
// on pages) or the dedicated ranges (a large tensor on a chunk of its own). The runtime keeps,
// for each live unplanned block, the one that served it, and frees it there.
#pragma once

#include <cstdint>
#include <string>

#include "src/stream_sync.h"
#include "vmm/driver.h"

namespace stalloc {

class SubAllocator {
 public:
  // 0 when it cannot be served (*why says why); nothing is left behind then.
  virtual vmm::DevicePtr allocate(std::uint64_t size, std::uint32_t stream, std::string* why) = 0;
  // False when ptr is not a live allocation of this one. used_by: the streams that used it.
  virtual bool free(vmm::DevicePtr ptr, StreamMask used_by) = 0;

 protected:
  ~SubAllocator() = default;
};

}  // namespace stalloc
