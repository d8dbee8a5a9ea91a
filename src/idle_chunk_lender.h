// Lends the plan pool's idle chunks to the packed arenas, so that requests no plan serves
// (misses, an iteration longer than any planned, MoE buffers past their largest size) are
// packed into memory the pool already holds instead of chunks created beside it.
//
// A lent chunk is occupied whole in the PlanPool for as long as it is lent, so a planned slot
// that wants it finds it taken and is served dynamically: lending can cost matches, never
// data. What may be lent depends on what the runtime is doing:
//   - no plan is being followed (profiling, an unknown iteration, a plan dropped after a run of
//     misses): any idle chunk;
//   - a plan is being followed: only chunks it does not use again in this iteration (every slot
//     naming them lies behind the matching cursor) and chunks past its pool size.
// The borrower gives a chunk back once the GPU work on it is known to be done; the chunk keeps
// the streams that used it, so the next tenant is ordered after them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "src/plan_pool.h"

namespace stalloc {

struct LentChunk {
  Chunk chunk;             // users: the streams its next user must be ordered after
  std::uint32_t index = 0;  // in the pool
};

class IdleChunkLender {
 public:
  explicit IdleChunkLender(PlanPool& pool) : pool_(pool) {}

  // No plan is followed: any idle chunk.
  void lend_any();
  // A plan of `plan_chunks` chunks is followed: `done` are its chunks no slot at or after the
  // cursor uses; `budget` (a Dynamic slot's budget, idle over its lifetime) are tried first.
  // Both stay valid until the next call.
  void lend_done(std::span<const std::uint32_t> budget, std::span<const std::uint32_t> done,
                 std::uint32_t plan_chunks);
  // Nothing may be lent.
  void lend_none();

  std::optional<LentChunk> borrow();
  void give_back(std::uint32_t index, StreamMask used_by);
  std::uint64_t lent() const { return lent_; }

 private:
  enum class Policy { None, Any, Done };
  std::optional<LentChunk> take(std::uint32_t index);

  PlanPool& pool_;
  Policy policy_ = Policy::None;
  std::span<const std::uint32_t> budget_;
  std::span<const std::uint32_t> done_;
  std::uint32_t plan_chunks_ = 0;
  std::size_t next_ = 0;  // where the last search stopped, so searches do not rescan
  std::uint64_t lent_ = 0;
};

}  // namespace stalloc
