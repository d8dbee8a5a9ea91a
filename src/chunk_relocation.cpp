#include "src/chunk_relocation.h"

namespace stalloc {

std::uint64_t relocate_around(ChunkPlan& plan, const std::vector<bool>& held) {
  std::vector<std::uint32_t> to(plan.num_chunks);
  std::uint32_t next = 0;
  std::uint64_t skipped = 0;
  for (std::uint32_t& c : to) {
    while (next < held.size() && held[next]) {
      ++next;
      ++skipped;
    }
    c = next++;
  }
  for (PlannedSlot& s : plan.slots) {
    for (std::uint32_t& c : s.chunks) c = to[c];
    for (std::uint32_t& c : s.budget_chunks) c = to[c];
  }
  plan.num_chunks = to.empty() ? 0 : std::uint64_t{to.back()} + 1;
  return skipped;
}

}  // namespace stalloc
