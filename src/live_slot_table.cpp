#include "src/live_slot_table.h"

#include <bit>

namespace stalloc {

LiveSlotTable::LiveSlotTable() : entries_(1024) {}

std::size_t LiveSlotTable::home(vmm::DevicePtr address) const {
  // Fibonacci hashing: tensors' addresses share their low bits (alignment) and high bits
  // (the reservation), so the product's top bits are taken.
  const std::uint64_t mixed = address * 0x9E3779B97F4A7C15ull;
  return static_cast<std::size_t>(mixed >> (64 - std::countr_zero(entries_.size())));
}

std::size_t LiveSlotTable::position(vmm::DevicePtr address) const {
  const std::size_t mask = entries_.size() - 1;
  std::size_t i = home(address);
  while (entries_[i].address != 0 && entries_[i].address != address) i = (i + 1) & mask;
  return i;
}

void LiveSlotTable::insert(vmm::DevicePtr address, LiveSlot slot) {
  if (2 * (size_ + 1) > entries_.size()) grow();
  entries_[position(address)] = {address, slot};
  ++size_;
}

LiveSlot LiveSlotTable::find(vmm::DevicePtr address) const {
  const Entry& e = entries_[position(address)];
  return e.address == address ? e.slot : LiveSlot{};
}

LiveSlot LiveSlotTable::take(vmm::DevicePtr address) {
  std::size_t hole = position(address);
  if (entries_[hole].address != address || address == 0) return {};
  const LiveSlot found = entries_[hole].slot;
  // Backward-shift deletion: an entry after the hole moves into it unless its home lies
  // cyclically in (hole, its position], so that no lookup's run is broken by the hole.
  const std::size_t mask = entries_.size() - 1;
  for (std::size_t i = (hole + 1) & mask; entries_[i].address != 0; i = (i + 1) & mask) {
    const std::size_t h = home(entries_[i].address);
    const bool stays = hole <= i ? (hole < h && h <= i) : (hole < h || h <= i);
    if (stays) continue;
    entries_[hole] = entries_[i];
    hole = i;
  }
  entries_[hole] = {};
  --size_;
  return found;
}

void LiveSlotTable::grow() {
  std::vector<Entry> old(entries_.size() * 2);
  old.swap(entries_);
  for (const Entry& e : old) {
    if (e.address != 0) entries_[position(e.address)] = e;
  }
}

}  // namespace stalloc
