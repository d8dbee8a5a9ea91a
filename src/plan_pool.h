// The physical chunks that installed plans map, shared by every plan in the cache (only one
// iteration runs at a time, so the pool is as large as the largest plan), and who occupies
// them. A plan is only trusted as far as it is followed: before a slot takes its chunks the
// pool checks that no live tenant holds the same bytes (a tensor of the previous iteration
// still alive, a slot of another plan, a request that came out of order) and refuses
// otherwise, so a wrong match costs a dynamic allocation, never corrupted data.
//
// That check is on the planned path of every malloc, and a 7B model's activations at 2 MiB
// are 50-200 chunks: looked at one chunk at a time it cost ~11 ns per chunk, over 1 us per
// malloc+free (bench_runtime BM_PlannedIteration, docs/benchmarks.md, "Runtime: the planned path"). So occupancy is kept as
// bits, 64 chunks to a word, and a tenant's whole chunks are grouped by word in its Footprint
// at install: the check, the occupancy and the streams to wait for cost a few word operations
// per tenant. That pays because the chunk colouring numbers a slot's chunks close together
// (runs of consecutive ids; lowest free first already gave ~2 words per slot on
// llama7b-tp2pp2-r at 2 MiB, where chunks handed out from a stack scattered over 35). Only chunks shared by partial tenants (a slot's first and
// last chunk) keep byte ranges.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/physical_memory.h"
#include "src/stream_sync.h"

namespace stalloc {

// Bytes [lo, hi) of pool chunk `chunk` (offsets inside the chunk).
struct ChunkPiece {
  std::uint32_t chunk = 0;
  std::uint32_t lo = 0;
  std::uint32_t hi = 0;
};

// 64 pool chunks: chunks 64 * index .. 64 * index + 63, those of `bits`.
struct ChunkWord {
  std::uint32_t index = 0;
  std::uint32_t count = 0;  // bits set (x86-64's baseline has no popcount instruction)
  std::uint64_t bits = 0;
};

// The bytes one tenant occupies in the pool, grouped for PlanPool: its whole chunks as words,
// the pieces that cover part of a chunk apart. A view into a FootprintTable.
struct Footprint {
  std::span<const ChunkWord> whole;
  std::span<const ChunkPiece> partial;
  bool empty() const { return whole.empty() && partial.empty(); }
  // The pieces again, whole chunks first (`granularity`: the pool's).
  void append_pieces(std::uint64_t granularity, std::vector<ChunkPiece>* out) const;
};

// Footprints stored one after another. The planned path takes a plan's slots in order, so it
// reads them as one stream; a heap block per slot cost a cache miss per malloc (llama7b-tp2pp2-r
// at 2 MiB: its 22,629 slots' pieces alone are 12 MB).
class FootprintTable {
 public:
  // Adds the footprint of the pieces; returns its index. Earlier footprints' views may move.
  std::uint32_t add(std::span<const ChunkPiece> pieces, std::uint64_t granularity);
  void clear();
  Footprint at(std::uint32_t index) const;
  std::size_t size() const { return word_begin_.size() - 1; }

 private:
  std::vector<ChunkWord> words_;
  std::vector<ChunkPiece> partial_;
  std::vector<std::uint32_t> word_begin_{0};
  std::vector<std::uint32_t> partial_begin_{0};
};

class PlanPool {
 public:
  explicit PlanPool(PhysicalMemory& memory);
  ~PlanPool();
  PlanPool(const PlanPool&) = delete;
  PlanPool& operator=(const PlanPool&) = delete;

  // Grows the pool to `count` chunks; false (pool unchanged) when memory runs out. `runs`: the
  // lengths of the runs the new chunks come in, in order (summing to the growth; else each
  // alone). A run of several is one physical handle, mapped only whole (pool_runs.h says which
  // chunks may share one), or chunks alone where no such handle can be made; a chunk alone is a
  // cached chunk if PhysicalMemory has one.
  bool grow_to(std::size_t count, std::span<const std::uint32_t> runs = {});
  // The runs again, with as many of PhysicalMemory's cached chunks used as there are: for the
  // chunks alone, then for the shortest runs, split into chunks alone (the cache would
  // otherwise sit beside the runs until trimmed).
  std::vector<std::uint32_t> with_cached_chunks(std::vector<std::uint32_t> runs) const;
  std::size_t size() const { return handles_.size(); }
  std::uint64_t granularity() const { return memory_.granularity(); }
  // The physical handle of the run whose first chunk is `head`.
  vmm::ChunkHandle handle(std::uint32_t head) const { return handles_[head]; }
  // The first chunk of the run holding `chunk`, and a run's length (1: a chunk alone).
  std::uint32_t run_head(std::uint32_t chunk) const { return run_head_[chunk]; }
  std::uint32_t run_length(std::uint32_t head) const { return run_length_[head]; }
  bool alone(std::uint32_t chunk) const { return run_length_[run_head_[chunk]] == 1; }
  // No chunk of the run headed at `head` has a tenant.
  bool run_idle(std::uint32_t head) const;
  // Some run holds several chunks.
  bool has_runs() const { return has_runs_; }
  // Makes each chunk of the run headed at `head` a chunk alone (a later plan holds them apart,
  // run_relabelling.h): its handle is released and chunks are taken from PhysicalMemory, so
  // no chunk of it may have a tenant, nor be mapped anywhere. False when a chunk has a tenant
  // or memory runs out; then the run is as it was, or, if the driver could not make it again
  // either, its chunks stay taken for good (no tenant, no lending, no handle).
  bool split_run(std::uint32_t head);
  // The streams whose work on the run's chunks no later tenant was ordered after yet.
  StreamMask run_users(std::uint32_t head) const;
  // The device was synchronized: no chunk's earlier work is in flight.
  void forget_users();
  // Chunks no tenant may take again (a view could not map them after a split, or the split
  // could not make them again): occupied for good, so that a slot on them conflicts and is
  // served elsewhere rather than at an address with nothing mapped.
  void set_aside(std::uint32_t first, std::uint32_t count);

  // Occupies the footprint when none of it overlaps a live tenant; *sync_with gets the streams
  // whose earlier work on it the new tenant must be ordered after, and *freed (if given) a
  // stamp at or after the free that ended that work (StreamSync::order_after).
  bool try_occupy(Footprint footprint, StreamMask* sync_with,
                  StreamSync::FreeStamp* freed = nullptr);
  // The same for pieces not grouped beforehand (a chunk lent whole, tests).
  bool try_occupy(std::span<const ChunkPiece> pieces, StreamMask* sync_with,
                  StreamSync::FreeStamp* freed = nullptr);
  // Ends a tenancy; `used_by` are the streams that used the pieces, `freed` the free's stamp
  // (StreamSync::now() at the free; unknown: a later reuse waits for all work so far).
  void vacate(Footprint footprint, StreamMask used_by,
              StreamSync::FreeStamp freed = StreamSync::kUnstamped);
  void vacate(std::span<const ChunkPiece> pieces, StreamMask used_by,
              StreamSync::FreeStamp freed = StreamSync::kUnstamped);
  bool idle(std::uint32_t chunk) const { return !test(any_, chunk); }
  // No live tenant overlaps the piece.
  bool available(const ChunkPiece& piece) const;
  std::size_t idle_count() const { return idle_count_; }

 private:
  struct Interval {
    std::uint32_t lo = 0;
    std::uint32_t hi = 0;
  };
  static bool test(const std::vector<std::uint64_t>& bits, std::uint32_t chunk) {
    return (bits[chunk >> 6] >> (chunk & 63)) & 1;
  }
  static ChunkWord bit_of(std::uint32_t chunk);
  bool whole(const ChunkPiece& piece) const { return piece.lo == 0 && piece.hi == whole_bytes_; }
  bool partial_available(const ChunkPiece& piece) const;
  // The streams whose unordered work touched any of the chunks.
  StreamMask users_of(std::uint32_t word, std::uint64_t bits) const;
  // Adds the word's chunks' unordered users to *users and, if any, their last free to *freed.
  void collect_users(const ChunkWord& w, StreamMask* users, StreamSync::FreeStamp* freed) const;
  std::vector<std::uint64_t>& users_bits(unsigned stream);
  void occupy_whole(const ChunkWord& w);
  void occupy_partial(const ChunkPiece& piece);
  void release_whole(const ChunkWord& w);
  void release_partial(const ChunkPiece& piece);
  void mark_used(std::uint32_t word, std::uint64_t bits, StreamMask used_by,
                 StreamSync::FreeStamp freed);

  PhysicalMemory& memory_;
  std::uint32_t whole_bytes_;
  std::vector<vmm::ChunkHandle> handles_;  // a run's handle, at each of its chunks
  std::vector<std::uint32_t> run_head_;
  std::vector<std::uint32_t> run_length_;  // at a run's head
  bool has_runs_ = false;
  std::vector<std::uint64_t> any_;        // a chunk has a live tenant
  std::vector<std::uint64_t> occupied_;   // a chunk has a tenant of all its bytes
  std::vector<std::vector<Interval>> partial_;  // per chunk: its partial tenants' bytes
  // Per stream, the chunks whose work on that stream no later whole tenant was ordered after
  // yet; `streams_` marks the streams that have bits.
  std::vector<std::vector<std::uint64_t>> users_;
  StreamMask streams_ = 0;
  // Per word, the latest stamp of a free that left users bits there (0 once none are left).
  std::vector<StreamSync::FreeStamp> freed_;
  std::size_t idle_count_ = 0;
};

}  // namespace stalloc
