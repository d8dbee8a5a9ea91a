#include "src/idle_chunk_lender.h"

namespace stalloc {

void IdleChunkLender::lend_any() { policy_ = Policy::Any; }

void IdleChunkLender::lend_done(std::span<const std::uint32_t> budget,
                                std::span<const std::uint32_t> done, std::uint32_t plan_chunks) {
  policy_ = Policy::Done;
  budget_ = budget;
  done_ = done;
  plan_chunks_ = plan_chunks;
}

ChunkPiece IdleChunkLender::whole(std::uint32_t index) const {
  return ChunkPiece{index, 0, static_cast<std::uint32_t>(pool_.granularity())};
}

template <typename Visit>
std::optional<LentChunk> IdleChunkLender::first_allowed(Visit&& visit) {
  if (policy_ == Policy::None) return std::nullopt;
  if (policy_ == Policy::Done) {
    for (std::uint32_t index : budget_) {
      if (auto lent = visit(index)) {
        // Idle only over the Dynamic slot's lifetime: once its tensor is gone the page must
        // not stay parked for tensors that outlive it.
        if (wanted_.size() <= index) wanted_.resize(pool_.size());
        wanted_[index] = true;
        return lent;
      }
    }
  }
  // Any chunk (Any), or those past the followed plan's pool (Done), from where the last search
  // stopped.
  const std::size_t n = pool_.size();
  const std::size_t first = policy_ == Policy::Any ? 0 : std::min<std::size_t>(plan_chunks_, n);
  const std::size_t span = n - first;
  for (std::size_t k = 0; k < span; ++k) {
    const std::size_t at = first + (next_ + k) % span;
    if (auto lent = visit(static_cast<std::uint32_t>(at))) {
      next_ = (at - first + 1) % span;
      return lent;
    }
  }
  if (policy_ == Policy::Done) {
    for (std::uint32_t index : done_) {
      if (auto lent = visit(index)) return lent;
    }
  }
  return std::nullopt;
}

std::optional<LentChunk> IdleChunkLender::take(std::uint32_t index) {
  if (!pool_.idle(index)) return std::nullopt;
  // A chunk of a longer run cannot be mapped alone (pool_runs.h): the run is split first,
  // if none of it has a tenant.
  if (!pool_.alone(index)) {
    const std::uint32_t head = pool_.run_head(index);
    if (!pool_.run_idle(head) || !reclaimer_.split_run(head)) return std::nullopt;
  }
  const ChunkPiece piece = whole(index);
  StreamMask sync_with = 0;
  if (!pool_.try_occupy(std::span<const ChunkPiece>(&piece, 1), &sync_with)) return std::nullopt;
  ++lent_;
  // A mark left from before it was lent is stale: no slot has found it lent yet.
  if (index < wanted_.size()) wanted_[index] = false;
  return LentChunk{Chunk{pool_.handle(index), sync_with}, index};
}

std::optional<LentChunk> IdleChunkLender::borrow() {
  if (pool_.idle_count() == 0) return std::nullopt;
  return first_allowed([&](std::uint32_t index) { return take(index); });
}

std::optional<LentChunk> IdleChunkLender::take_parked(const ChunkBorrower* asker,
                                                      std::uint64_t first, std::uint64_t last) {
  if (parked_count_ == 0) return std::nullopt;
  return first_allowed([&](std::uint32_t index) -> std::optional<LentChunk> {
    if (!is_parked(index)) return std::nullopt;
    const Parked parked = parked_[index];
    if (parked.borrower == asker && first <= parked.page && parked.page <= last) return std::nullopt;
    parked.borrower->detach(parked.page);  // gives the chunk back, which unparks it
    return take(index);
  });
}

void IdleChunkLender::park(std::uint32_t index, ChunkBorrower* borrower, std::uint64_t page) {
  if (parked_.size() <= index) parked_.resize(pool_.size());
  parked_[index] = {borrower, page};
  ++parked_count_;
}

void IdleChunkLender::unpark(std::uint32_t index) {
  if (!is_parked(index)) return;
  parked_[index] = {};
  --parked_count_;
}

bool IdleChunkLender::reclaim(std::span<const ChunkPiece> pieces) {
  if (parked_count_ == 0) return false;
  // Only when every piece is then free: a slot that conflicts anyway must not cost the
  // arenas their parked pages.
  bool any = false;
  for (const ChunkPiece& p : pieces) {
    if (is_parked(p.chunk)) {
      any = true;
    } else if (!pool_.available(p)) {
      return false;
    }
  }
  if (!any) return false;
  for (const ChunkPiece& p : pieces) {
    if (is_parked(p.chunk)) parked_[p.chunk].borrower->detach(parked_[p.chunk].page);
  }
  return true;
}

void IdleChunkLender::want(std::span<const ChunkPiece> pieces) {
  for (const ChunkPiece& p : pieces) {
    if (wanted_.size() <= p.chunk) wanted_.resize(pool_.size());
    wanted_[p.chunk] = true;
  }
}

void IdleChunkLender::give_back(std::uint32_t index, StreamMask used_by) {
  unpark(index);
  if (index < wanted_.size()) wanted_[index] = false;
  const ChunkPiece piece = whole(index);
  pool_.vacate(std::span<const ChunkPiece>(&piece, 1), used_by);
  --lent_;
}

}  // namespace stalloc
