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

void IdleChunkLender::lend_none() { policy_ = Policy::None; }

std::optional<LentChunk> IdleChunkLender::take(std::uint32_t index) {
  if (!pool_.idle(index)) return std::nullopt;
  const std::uint32_t whole = static_cast<std::uint32_t>(pool_.granularity());
  const ChunkPiece piece{index, 0, whole};
  StreamMask sync_with = 0;
  if (!pool_.try_occupy(std::span<const ChunkPiece>(&piece, 1), &sync_with)) return std::nullopt;
  ++lent_;
  return LentChunk{Chunk{pool_.handle(index), sync_with}, index};
}

std::optional<LentChunk> IdleChunkLender::borrow() {
  if (policy_ == Policy::None || pool_.idle_count() == 0) return std::nullopt;
  const std::size_t n = pool_.size();
  if (policy_ == Policy::Done) {
    for (std::uint32_t index : budget_) {
      if (auto lent = take(index)) return lent;
    }
  }
  if (policy_ == Policy::Any || plan_chunks_ < n) {
    // Any chunk (Any), or those past the followed plan's pool (Done).
    const std::size_t first = policy_ == Policy::Any ? 0 : plan_chunks_;
    const std::size_t span = n - first;
    for (std::size_t k = 0; k < span; ++k) {
      const std::size_t at = first + (next_ + k) % span;
      if (auto lent = take(static_cast<std::uint32_t>(at))) {
        next_ = (at - first + 1) % span;
        return lent;
      }
    }
  }
  if (policy_ == Policy::Done) {
    for (std::uint32_t index : done_) {
      if (auto lent = take(index)) return lent;
    }
  }
  return std::nullopt;
}

void IdleChunkLender::park(std::uint32_t index, ChunkBorrower* borrower, std::uint64_t page) {
  if (parked_.size() <= index) parked_.resize(pool_.size());
  parked_[index] = {borrower, page};
  ++parked_count_;
}

void IdleChunkLender::unpark(std::uint32_t index) {
  if (index >= parked_.size() || parked_[index].borrower == nullptr) return;
  parked_[index] = {};
  --parked_count_;
}

bool IdleChunkLender::reclaim(std::span<const ChunkPiece> pieces) {
  if (parked_count_ == 0) return false;
  bool any = false;
  for (const ChunkPiece& p : pieces) {
    if (p.chunk >= parked_.size() || parked_[p.chunk].borrower == nullptr) continue;
    const Parked parked = parked_[p.chunk];
    parked.borrower->detach(parked.page);  // gives the chunk back, which unparks it
    any = true;
  }
  return any;
}

std::optional<LentChunk> IdleChunkLender::take_parked(const ChunkBorrower* asker,
                                                      std::uint64_t first, std::uint64_t last) {
  if (parked_count_ == 0) return std::nullopt;
  const std::size_t n = parked_.size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t at = (next_parked_ + k) % n;
    const Parked parked = parked_[at];
    if (parked.borrower == nullptr ||
        (parked.borrower == asker && first <= parked.page && parked.page <= last)) {
      continue;
    }
    next_parked_ = (at + 1) % n;
    parked.borrower->detach(parked.page);
    return take(static_cast<std::uint32_t>(at));
  }
  return std::nullopt;
}

void IdleChunkLender::give_back(std::uint32_t index, StreamMask used_by) {
  unpark(index);
  const std::uint32_t whole = static_cast<std::uint32_t>(pool_.granularity());
  const ChunkPiece piece{index, 0, whole};
  pool_.vacate(std::span<const ChunkPiece>(&piece, 1), used_by);
  --lent_;
}

}  // namespace stalloc
