// Lends the plan pool's idle chunks to the packed arenas, so that requests no plan serves
// (misses, an iteration longer than any planned, MoE buffers past their largest size) are
// packed into memory the pool already holds instead of chunks created beside it.
//
// A lent chunk is occupied whole in the PlanPool for as long as it is lent, so a planned slot
// that wants it finds it taken and is served dynamically: lending can cost matches, never
// data. What may be lent is the runtime's choice (Runtime::serve_unplanned):
//   - no plan is being followed (profiling, no plan installed yet), or a request the plan lacks
//     has already made the runtime create a chunk in this iteration above the most it ever held
//     and beyond what the arenas' emptied pages hold: any idle chunk;
//   - a plan is being followed: the matched Dynamic slot's budget, chunks it does not use again
//     in this iteration (every slot naming them lies behind the matching cursor) and chunks
//     past its pool size.
// A borrower keeps an emptied lent page mapped ("parked") for its next tensor rather than map
// and unmap a chunk per tensor (MoE buffers, sequence-length-dependent activations come and go
// every micro-batch). When a planned slot wants a parked chunk, reclaim() makes the borrower
// detach it at once: the chunk returns with the streams that used it, so the slot's tensor is
// ordered after their work on the GPU (an event wait, never a host wait), and the borrower
// unmaps its page later, once that work is done. When a slot finds a lent chunk still holding
// a tensor, want() marks it and its borrower gives it back as soon as the page empties rather
// than parking it: otherwise the borrower would reuse it for the very tensor the slot could not
// take, and the conflict would come back every iteration. A chunk lent from a Dynamic slot's
// budget is marked so from the start: it is idle only over that slot's lifetime, and parked
// it would take later tensors that outlive the slot (at G = 2 MiB: qwen-moe-16 99.50% ->
// 99.67% utilization; qwen-moe-32, the five iterations settling after the Dynamic plan's
// install 87k -> 64k VMM calls, the calm ones after them 304 -> 361 on average).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "src/plan_pool.h"
#include "src/reclaimer.h"

namespace stalloc {

struct LentChunk {
  Chunk chunk;             // users: the streams its next user must be ordered after
  std::uint32_t index = 0;  // in the pool
};

// What holds lent chunks: it must give a parked one back when asked.
class ChunkBorrower {
 public:
  // Gives back the chunk lent to `page` (parked, no tenant) now, through give_back.
  virtual void detach(std::uint64_t page) = 0;

 protected:
  ~ChunkBorrower() = default;
};

class IdleChunkLender {
 public:
  // A chunk of a run of several (pool_runs.h), all of them idle, is lent once the reclaimer has
  // split the run into chunks alone (Reclaimer::split_run).
  explicit IdleChunkLender(PlanPool& pool, Reclaimer& reclaimer = no_reclaimer())
      : pool_(pool), reclaimer_(reclaimer) {}

  // No plan is followed: any idle chunk.
  void lend_any();
  // A plan of `plan_chunks` chunks is followed: `budget` (a Dynamic slot's budget, idle over
  // its lifetime) first, then chunks past the plan's pool, then `done`, its chunks no slot at or
  // after the cursor uses. Both spans stay valid until the next call.
  void lend_done(std::span<const std::uint32_t> budget, std::span<const std::uint32_t> done,
                 std::uint32_t plan_chunks);

  std::optional<LentChunk> borrow();
  void give_back(std::uint32_t index, StreamMask used_by);
  std::uint64_t lent() const { return lent_; }

  // A lent chunk's page is empty and kept mapped by `borrower`; unpark when it is used again.
  void park(std::uint32_t index, ChunkBorrower* borrower, std::uint64_t page);
  void unpark(std::uint32_t index);
  // When the pieces are free but for parked chunks, detaches those; true when any came back.
  bool reclaim(std::span<const ChunkPiece> pieces);
  // A planned slot found these pieces taken: their lent chunks are not parked again once
  // emptied, but given back, so that the next iteration finds them free.
  void want(std::span<const ChunkPiece> pieces);
  // Asked of lent chunks only.
  bool wanted(std::uint32_t index) const { return index < wanted_.size() && wanted_[index]; }
  // Nothing idle may be lent: moves a parked chunk the policy allows to `asker` instead of
  // letting it create one (never one of its own pages first..last, which it is about to use).
  std::optional<LentChunk> take_parked(const ChunkBorrower* asker, std::uint64_t first,
                                       std::uint64_t last);
  std::uint64_t parked() const { return parked_count_; }

 private:
  enum class Policy { None, Any, Done };
  std::optional<LentChunk> take(std::uint32_t index);
  ChunkPiece whole(std::uint32_t index) const;
  bool is_parked(std::uint32_t index) const {
    return index < parked_.size() && parked_[index].borrower != nullptr;
  }
  // The first lent chunk `visit` makes of the chunks the policy allows, in preference order.
  template <typename Visit>
  std::optional<LentChunk> first_allowed(Visit&& visit);

  PlanPool& pool_;
  Reclaimer& reclaimer_;
  Policy policy_ = Policy::None;
  std::span<const std::uint32_t> budget_;
  std::span<const std::uint32_t> done_;
  std::uint32_t plan_chunks_ = 0;
  std::size_t next_ = 0;  // where the last search stopped, so searches do not rescan
  std::uint64_t lent_ = 0;
  struct Parked {
    ChunkBorrower* borrower = nullptr;
    std::uint64_t page = 0;
  };
  std::vector<Parked> parked_;  // by pool chunk
  // Chunks a slot found taken; only a lent one's mark counts, from then until it comes back.
  std::vector<bool> wanted_;
  std::uint64_t parked_count_ = 0;
};

}  // namespace stalloc
