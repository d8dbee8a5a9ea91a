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

void IdleChunkLender::give_back(std::uint32_t index, StreamMask used_by) {
  const std::uint32_t whole = static_cast<std::uint32_t>(pool_.granularity());
  const ChunkPiece piece{index, 0, whole};
  pool_.vacate(std::span<const ChunkPiece>(&piece, 1), used_by);
  --lent_;
}

}  // namespace stalloc
