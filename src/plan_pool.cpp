#include "src/plan_pool.h"

#include <algorithm>

namespace stalloc {

PlanPool::PlanPool(PhysicalMemory& memory) : memory_(memory) {}

PlanPool::~PlanPool() {
  for (PoolChunk& c : chunks_) memory_.give_back(c.chunk);
}

bool PlanPool::grow_to(std::size_t count) {
  if (count <= chunks_.size()) return true;
  if (!memory_.can_hold(count - chunks_.size())) return false;
  std::vector<Chunk> added;
  while (chunks_.size() + added.size() < count) {
    auto c = memory_.acquire();
    if (!c) {
      for (const Chunk& a : added) memory_.give_back(a);
      return false;
    }
    added.push_back(*c);
  }
  for (const Chunk& a : added) chunks_.push_back(PoolChunk{a, {}});
  idle_count_ += added.size();
  return true;
}

bool PlanPool::available(const ChunkPiece& piece) const {
  for (const Interval& i : chunks_[piece.chunk].live) {
    if (i.lo < piece.hi && piece.lo < i.hi) return false;
  }
  return true;
}

bool PlanPool::try_occupy(std::span<const ChunkPiece> pieces, StreamMask* sync_with) {
  StreamMask users = 0;
  for (const ChunkPiece& p : pieces) {
    if (!available(p)) return false;
    users |= chunks_[p.chunk].chunk.users;
  }
  const std::uint64_t whole = memory_.granularity();
  for (const ChunkPiece& p : pieces) {
    PoolChunk& c = chunks_[p.chunk];
    if (c.live.empty()) --idle_count_;
    c.live.push_back({p.lo, p.hi});
    // A tenant of the whole chunk is ordered after every earlier user: they need not be
    // remembered. A partial tenant leaves other bytes whose users are still unordered.
    if (p.lo == 0 && p.hi == whole) c.chunk.users = 0;
  }
  *sync_with = users;
  return true;
}

void PlanPool::vacate(std::span<const ChunkPiece> pieces, StreamMask used_by) {
  for (const ChunkPiece& p : pieces) {
    PoolChunk& c = chunks_[p.chunk];
    auto it = std::find_if(c.live.begin(), c.live.end(),
                           [&](const Interval& i) { return i.lo == p.lo && i.hi == p.hi; });
    if (it != c.live.end()) {
      *it = c.live.back();
      c.live.pop_back();
      if (c.live.empty()) ++idle_count_;
    }
    c.chunk.users |= used_by;
  }
}

}  // namespace stalloc
