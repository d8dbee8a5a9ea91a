// The live planned tensors by address: which plan and slot a free or record_stream names.
//
// Found through the plan, the slot cost four cache misses per free (the plan's page -> view
// table, the view, its list of live slots, each candidate's address), over 300 ns of a
// 700 ns malloc+free in llama7b-tp2pp2-r's steady iteration. Only the live tensors are here (a
// few thousand at most), in one open-addressing array that stays in cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vmm/driver.h"

namespace stalloc {

class InstalledPlan;

struct LiveSlot {
  InstalledPlan* plan = nullptr;
  std::uint32_t slot = 0;
};

class LiveSlotTable {
 public:
  LiveSlotTable();
  // `address` is not in the table (a live tensor's address is unique) and not 0.
  void insert(vmm::DevicePtr address, LiveSlot slot);
  // The entry, removed; plan nullptr when the address is not there.
  LiveSlot take(vmm::DevicePtr address);
  // The entry, or plan nullptr.
  LiveSlot find(vmm::DevicePtr address) const;
  std::size_t size() const { return size_; }

 private:
  struct Entry {
    vmm::DevicePtr address = 0;  // 0: empty
    LiveSlot slot;
  };
  std::size_t home(vmm::DevicePtr address) const;
  std::size_t position(vmm::DevicePtr address) const;  // its entry, or the empty one ending its run
  void grow();

  std::vector<Entry> entries_;  // a power of two, at most half full
  std::size_t size_ = 0;
};

}  // namespace stalloc
