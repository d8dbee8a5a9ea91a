#include "src/plan_pool.h"

#include <algorithm>
#include <bit>

#include "src/stream_sync.h"

namespace stalloc {

void Footprint::append_pieces(std::uint64_t granularity, std::vector<ChunkPiece>* out) const {
  for (const ChunkWord& w : whole) {
    for (std::uint64_t bits = w.bits; bits != 0; bits &= bits - 1) {
      const auto chunk = static_cast<std::uint32_t>(w.index * 64 + std::countr_zero(bits));
      out->push_back({chunk, 0, static_cast<std::uint32_t>(granularity)});
    }
  }
  out->insert(out->end(), partial.begin(), partial.end());
}

std::uint32_t FootprintTable::add(std::span<const ChunkPiece> pieces, std::uint64_t granularity) {
  const std::size_t first_word = words_.size();
  for (const ChunkPiece& p : pieces) {
    if (p.lo != 0 || p.hi != granularity) {
      partial_.push_back(p);
      continue;
    }
    // A slot's chunks come in runs, so a word usually follows on from the one before.
    const std::uint32_t word = p.chunk >> 6;
    if (words_.size() == first_word || words_.back().index != word) words_.push_back({word, 0, 0});
    words_.back().bits |= std::uint64_t{1} << (p.chunk & 63);
    ++words_.back().count;
  }
  word_begin_.push_back(static_cast<std::uint32_t>(words_.size()));
  partial_begin_.push_back(static_cast<std::uint32_t>(partial_.size()));
  return static_cast<std::uint32_t>(size() - 1);
}

void FootprintTable::clear() {
  words_.clear();
  partial_.clear();
  word_begin_.resize(1);
  partial_begin_.resize(1);
}

Footprint FootprintTable::at(std::uint32_t index) const {
  const std::span<const ChunkWord> words(words_);
  const std::span<const ChunkPiece> partial(partial_);
  const std::uint32_t w = word_begin_[index];
  const std::uint32_t p = partial_begin_[index];
  return {words.subspan(w, word_begin_[index + 1] - w),
          partial.subspan(p, partial_begin_[index + 1] - p)};
}

PlanPool::PlanPool(PhysicalMemory& memory)
    : memory_(memory), whole_bytes_(static_cast<std::uint32_t>(memory.granularity())) {}

PlanPool::~PlanPool() {
  for (std::uint32_t c = 0; c < handles_.size(); c += run_length_[c]) {
    if (run_length_[c] > 1) {
      memory_.release_dedicated(Chunk{handles_[c], 0}, run_length_[c]);
      continue;
    }
    if (handles_[c] == 0) continue;  // lost in a split (split_run)
    const ChunkWord w = bit_of(c);
    memory_.give_back(Chunk{handles_[c], users_of(w.index, w.bits)});
  }
}

std::vector<std::uint64_t>& PlanPool::users_bits(unsigned stream) {
  if (users_.size() <= stream) users_.resize(stream + 1);
  users_[stream].resize(any_.size(), 0);
  streams_ |= StreamMask{1} << stream;
  return users_[stream];
}

std::vector<std::uint32_t> PlanPool::with_cached_chunks(std::vector<std::uint32_t> runs) const {
  // Cached chunks would otherwise sit beside the runs: they serve the chunks alone and then
  // the shortest runs, chunk by chunk.
  const auto singles = static_cast<std::uint64_t>(std::count(runs.begin(), runs.end(), 1u));
  std::uint64_t cached = memory_.cached_bytes() / memory_.granularity();
  cached -= std::min(cached, singles);
  std::vector<std::size_t> shortest;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    if (runs[r] > 1) shortest.push_back(r);
  }
  std::stable_sort(shortest.begin(), shortest.end(),
                   [&](std::size_t a, std::size_t b) { return runs[a] < runs[b]; });
  std::vector<bool> split(runs.size(), false);
  for (std::size_t r : shortest) {
    if (runs[r] > cached) break;
    split[r] = true;
    cached -= runs[r];
  }
  std::vector<std::uint32_t> out;
  out.reserve(runs.size());
  for (std::size_t r = 0; r < runs.size(); ++r) out.insert(out.end(), split[r] ? runs[r] : 1, split[r] ? 1 : runs[r]);
  return out;
}

bool PlanPool::grow_to(std::size_t count, std::span<const std::uint32_t> runs) {
  if (count <= handles_.size()) return true;
  const std::size_t growth = count - handles_.size();
  std::vector<std::uint32_t> lengths(runs.begin(), runs.end());
  std::size_t sum = 0;
  for (std::uint32_t l : lengths) sum += l;
  if (lengths.empty() || sum != growth) lengths.assign(growth, 1);
  if (!memory_.can_hold(growth)) return false;
  struct Added {
    Chunk chunk;
    std::uint32_t length = 1;
  };
  std::vector<Added> added;
  auto undo = [&] {
    for (const Added& a : added) {
      if (a.length == 1) {
        memory_.give_back(a.chunk);
      } else {
        memory_.release_dedicated(a.chunk, a.length);
      }
    }
  };
  for (std::uint32_t length : lengths) {
    // A handle of a whole run may not be had where chunks of one granule still are (a driver
    // near its memory's end): the run is then made of chunks alone.
    if (length > 1) {
      if (auto run = memory_.acquire_dedicated(length)) {
        added.push_back({*run, length});
        continue;
      }
    }
    for (std::uint32_t k = 0; k < length; ++k) {
      auto c = memory_.acquire();
      if (!c) {
        undo();
        return false;
      }
      added.push_back({*c, 1});
    }
  }
  const std::size_t words = (count + 63) / 64;
  any_.resize(words, 0);
  occupied_.resize(words, 0);
  freed_.resize(words, 0);
  partial_.resize(count);
  for (StreamMask s = streams_; s != 0; s &= s - 1) users_[std::countr_zero(s)].resize(words, 0);
  for (const Added& a : added) {
    const auto head = static_cast<std::uint32_t>(handles_.size());
    has_runs_ = has_runs_ || a.length > 1;
    for (std::uint32_t k = 0; k < a.length; ++k) {
      handles_.push_back(a.chunk.handle);
      run_head_.push_back(head);
      run_length_.push_back(k == 0 ? a.length : 0);
    }
    // A chunk from the cache may still have work in flight on its former tenant's streams.
    const ChunkWord w = bit_of(head);
    mark_used(w.index, w.bits, a.chunk.users, StreamSync::kUnstamped);
  }
  idle_count_ += growth;
  return true;
}

bool PlanPool::run_idle(std::uint32_t head) const {
  for (std::uint32_t k = 0; k < run_length_[head]; ++k) {
    if (!idle(head + k)) return false;
  }
  return true;
}

bool PlanPool::split_run(std::uint32_t head) {
  const std::uint32_t length = run_length_[head];
  if (length < 2) return true;
  if (!run_idle(head)) return false;
  // Released first, so that the split never holds both (the peak).
  memory_.release_dedicated(Chunk{handles_[head], 0}, length);
  std::vector<Chunk> singles;
  while (singles.size() < length) {
    auto c = memory_.acquire();
    if (!c) break;
    singles.push_back(*c);
  }
  if (singles.size() < length) {
    for (const Chunk& c : singles) memory_.give_back(c);
    if (auto run = memory_.acquire_dedicated(length)) {
      for (std::uint32_t k = 0; k < length; ++k) handles_[head + k] = run->handle;
      return false;
    }
    for (std::uint32_t k = 0; k < length; ++k) {
      handles_[head + k] = 0;
      run_head_[head + k] = head + k;
      run_length_[head + k] = 1;
    }
    set_aside(head, length);
    return false;
  }
  for (std::uint32_t k = 0; k < length; ++k) {
    handles_[head + k] = singles[k].handle;
    run_head_[head + k] = head + k;
    run_length_[head + k] = 1;
    const ChunkWord w = bit_of(head + k);
    mark_used(w.index, w.bits, singles[k].users, StreamSync::kUnstamped);
  }
  return true;
}

StreamMask PlanPool::run_users(std::uint32_t head) const {
  StreamMask users = 0;
  for (std::uint32_t k = 0; k < run_length_[head]; ++k) {
    const ChunkWord w = bit_of(head + k);
    users |= users_of(w.index, w.bits);
  }
  return users;
}

void PlanPool::forget_users() {
  for (std::vector<std::uint64_t>& bits : users_) std::fill(bits.begin(), bits.end(), 0);
  std::fill(freed_.begin(), freed_.end(), 0);
}

void PlanPool::set_aside(std::uint32_t first, std::uint32_t count) {
  for (std::uint32_t c = first; c < first + count; ++c) {
    const ChunkWord w = bit_of(c);
    if ((any_[w.index] & w.bits) == 0) --idle_count_;
    any_[w.index] |= w.bits;
    occupied_[w.index] |= w.bits;
  }
}

bool PlanPool::partial_available(const ChunkPiece& piece) const {
  if (test(occupied_, piece.chunk)) return false;
  for (const Interval& i : partial_[piece.chunk]) {
    if (i.lo < piece.hi && piece.lo < i.hi) return false;
  }
  return true;
}

bool PlanPool::available(const ChunkPiece& piece) const {
  return whole(piece) ? !test(any_, piece.chunk) : partial_available(piece);
}

StreamMask PlanPool::users_of(std::uint32_t word, std::uint64_t bits) const {
  StreamMask users = 0;
  for (StreamMask s = streams_; s != 0; s &= s - 1) {
    const int stream = std::countr_zero(s);
    if ((users_[stream][word] & bits) != 0) users |= StreamMask{1} << stream;
  }
  return users;
}

void PlanPool::collect_users(const ChunkWord& w, StreamMask* users,
                             StreamSync::FreeStamp* freed) const {
  const StreamMask u = users_of(w.index, w.bits);
  if (u != 0) *freed = std::max(*freed, freed_[w.index]);
  *users |= u;
}

void PlanPool::occupy_whole(const ChunkWord& w) {
  any_[w.index] |= w.bits;
  occupied_[w.index] |= w.bits;
  idle_count_ -= w.count;
  // A tenant of the whole chunk is ordered after every earlier user: they need not be
  // remembered. A partial tenant leaves other bytes whose users are still unordered.
  std::uint64_t left = 0;
  for (StreamMask s = streams_; s != 0; s &= s - 1) {
    std::uint64_t& users = users_[std::countr_zero(s)][w.index];
    users &= ~w.bits;
    left |= users;
  }
  if (left == 0) freed_[w.index] = 0;
}

void PlanPool::occupy_partial(const ChunkPiece& piece) {
  const ChunkWord w = bit_of(piece.chunk);
  std::uint64_t& any = any_[w.index];
  if ((any & w.bits) == 0) --idle_count_;
  any |= w.bits;
  partial_[piece.chunk].push_back({piece.lo, piece.hi});
}

void PlanPool::release_whole(const ChunkWord& w) {
  std::uint64_t held = occupied_[w.index] & w.bits;
  occupied_[w.index] &= ~held;
  any_[w.index] &= ~held;
  if (held == w.bits) {
    idle_count_ += w.count;
  } else {
    for (; held != 0; held &= held - 1) ++idle_count_;
  }
}

void PlanPool::release_partial(const ChunkPiece& piece) {
  std::vector<Interval>& live = partial_[piece.chunk];
  auto it = std::find_if(live.begin(), live.end(), [&](const Interval& i) {
    return i.lo == piece.lo && i.hi == piece.hi;
  });
  if (it == live.end()) return;
  *it = live.back();
  live.pop_back();
  if (live.empty()) {
    const ChunkWord w = bit_of(piece.chunk);
    any_[w.index] &= ~w.bits;
    ++idle_count_;
  }
}

void PlanPool::mark_used(std::uint32_t word, std::uint64_t bits, StreamMask used_by,
                         StreamSync::FreeStamp freed) {
  if (used_by == 0) return;
  for (StreamMask s = used_by; s != 0; s &= s - 1) {
    users_bits(static_cast<unsigned>(std::countr_zero(s)))[word] |= bits;
  }
  freed_[word] = std::max(freed_[word], freed);
}

ChunkWord PlanPool::bit_of(std::uint32_t chunk) {
  return {chunk >> 6, 1, std::uint64_t{1} << (chunk & 63)};
}

bool PlanPool::try_occupy(Footprint footprint, StreamMask* sync_with,
                          StreamSync::FreeStamp* freed) {
  for (const ChunkWord& w : footprint.whole) {
    if ((any_[w.index] & w.bits) != 0) return false;
  }
  for (const ChunkPiece& p : footprint.partial) {
    if (!partial_available(p)) return false;
  }
  StreamMask users = 0;
  StreamSync::FreeStamp stamp = 0;
  for (const ChunkWord& w : footprint.whole) collect_users(w, &users, &stamp);
  for (const ChunkPiece& p : footprint.partial) collect_users(bit_of(p.chunk), &users, &stamp);
  for (const ChunkWord& w : footprint.whole) occupy_whole(w);
  for (const ChunkPiece& p : footprint.partial) occupy_partial(p);
  *sync_with = users;
  if (freed != nullptr) *freed = stamp;
  return true;
}

bool PlanPool::try_occupy(std::span<const ChunkPiece> pieces, StreamMask* sync_with,
                          StreamSync::FreeStamp* freed) {
  StreamMask users = 0;
  StreamSync::FreeStamp stamp = 0;
  for (const ChunkPiece& p : pieces) {
    if (!available(p)) return false;
    collect_users(bit_of(p.chunk), &users, &stamp);
  }
  for (const ChunkPiece& p : pieces) {
    if (whole(p)) {
      occupy_whole(bit_of(p.chunk));
    } else {
      occupy_partial(p);
    }
  }
  *sync_with = users;
  if (freed != nullptr) *freed = stamp;
  return true;
}

void PlanPool::vacate(Footprint footprint, StreamMask used_by, StreamSync::FreeStamp freed) {
  for (const ChunkWord& w : footprint.whole) release_whole(w);
  for (const ChunkPiece& p : footprint.partial) release_partial(p);
  if (used_by == 0) return;
  for (StreamMask s = used_by; s != 0; s &= s - 1) {
    std::vector<std::uint64_t>& users = users_bits(static_cast<unsigned>(std::countr_zero(s)));
    for (const ChunkWord& w : footprint.whole) users[w.index] |= w.bits;
    for (const ChunkPiece& p : footprint.partial) {
      const ChunkWord w = bit_of(p.chunk);
      users[w.index] |= w.bits;
    }
  }
  for (const ChunkWord& w : footprint.whole) freed_[w.index] = std::max(freed_[w.index], freed);
  for (const ChunkPiece& p : footprint.partial) {
    const std::uint32_t word = bit_of(p.chunk).index;
    freed_[word] = std::max(freed_[word], freed);
  }
}

void PlanPool::vacate(std::span<const ChunkPiece> pieces, StreamMask used_by,
                      StreamSync::FreeStamp freed) {
  for (const ChunkPiece& p : pieces) {
    const ChunkWord w = bit_of(p.chunk);
    if (whole(p)) {
      release_whole(w);
    } else {
      release_partial(p);
    }
    mark_used(w.index, w.bits, used_by, freed);
  }
}

}  // namespace stalloc
