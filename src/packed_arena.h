// Requests no plan covers (profiling iterations, misses, persistent tensors), packed byte by
// byte into one large virtual reservation whose pages are backed by physical chunks only while
// some allocation overlaps them.
//
// Why not a range per request: a tensor then holds whole chunks, and at a large granularity the
// rounding is most of the waste (a 6 MiB weight in a 32 MiB chunk). Why not a slab of size
// classes: power-of-two blocks waste up to half, and a class's chunks never go back. Here a
// request takes the best-fitting free interval (ties: lowest address), so parameters and
// optimizer states made one after another sit back to back, unless one of the next few larger
// intervals, at its start or its end, needs fewer pages mapped: best fit alone ignores which
// pages are mapped, and a tensor made every iteration (an MoE buffer that outgrew its view)
// landed on unmapped pages while emptied mapped ones aged out, two or three VMM calls a page
// (qwen-moe-16 at G = 2 MiB: 5.6k -> 1.3k VMM calls per iteration after the plan's install,
// utilization 99.67% -> 99.68%; docs/decisions.md, "Placement on mapped pages"). A page whose last allocation is
// freed stays mapped while it is among the few most recently emptied (idle_bytes), so that a
// tensor freed and made again costs no VMM call; older ones are unmapped once events show the
// GPU is done with them, and their chunks go back to PhysicalMemory. A page needed again before
// that keeps its mapping.
//
// Streams: an arena belongs to one stream (the runtime keeps one per stream, as PyTorch keeps
// its pools per stream). A free interval remembers the streams that used its bytes; reusing them
// on another stream makes that stream wait on an event (never the host), and only intervals
// with the same streams merge, so one tensor used by a second stream (record_stream) does not
// make every later allocation wait for that stream. A chunk from PhysicalMemory brings its own
// users the same way.
//
// Chunks come from PhysicalMemory's cache first, then from the arena's own idle pages (the one
// emptied longest ago whose GPU work is done, per a marker: events recorded when a free empties
// pages, one per stream, shared by those pages; kept mapped, an idle page costs nothing until a
// chunk is wanted elsewhere in the arena), then from
// the plan pool's idle chunks when an
// IdleChunkLender allows (idle_chunk_lender.h), and only then are created. An emptied lent
// page stays mapped (parked) for the arena's next tensor until the pool wants the chunk back;
// then it is detached: the chunk goes back at once, and the page's bytes leave the free list
// until its unmap, after the GPU work on it.
//
// Extents: a chunk made for an allocation may back the whole run of its unmapped pages (one
// cuMemCreate, one cuMemMap), not one page: the driver's cost is per call (docs/driver_costs.md)
// and an online workload first touches most of its memory this way. cuMemMap maps a chunk whole
// and cuMemUnmap must undo one cuMemMap, so such an extent is the unit of mapping: its first
// page (the head) keeps the chunk and the idle, marker and unmap state, it is idle only when all
// its pages are empty, and each cuMemSetAccess covers the extents it touches whole. Its pages
// cannot move one by one, so extents are made only while memory grows past its high water.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/free_markers.h"
#include "src/idle_chunk_lender.h"
#include "src/physical_memory.h"
#include "src/reclaimer.h"
#include "src/stream_sync.h"
#include "src/sub_allocator.h"
#include "vmm/driver.h"

namespace stalloc {

// How large a chunk a PackedArena makes for a run of its pages (the constructor's extents).
struct ArenaExtents {
  std::uint64_t max_granules = 1;
  std::uint64_t held_share = 0;
};

class PackedArena final : public SubAllocator, private ChunkBorrower {
 public:
  static constexpr std::uint64_t kAlignment = 512;

  // reservation_bytes: the virtual space reserved at the first allocation (a multiple of the
  // granularity); it bounds what can be live in the arena at once.
  // home: the stream the arena serves. idle_bytes: emptied pages kept mapped for reuse.
  // lender: where idle pool chunks may be borrowed (null: none); it outlives the arena.
  // reclaimer: asked, when the arena is short of a chunk and has none of its own nor lent to
  // take, to put one in PhysicalMemory's cache (Reclaimer::chunk_for_arena).
  // page_granules: pages of that many granules, each backed by one chunk of its own size made
  // for the arena (one cuMemCreate and one cuMemMap per page, as PyTorch's expandable segments
  // map 20 MiB pages): no lender then, and its chunks never go to PhysicalMemory's cache.
  // extents: where an allocation needs several pages that no cached, idle or lent chunk backs
  // and PhysicalMemory holds its high water, one chunk is made for the run of them, of at most
  // max_granules and of at most 1/held_share of the memory held (0: no such bound); such a
  // chunk is unmapped whole, once all its pages are empty, and released rather than cached (no
  // other page fits it). The default: a chunk per page. Pages of page_granules > 1 ignore it.
  PackedArena(vmm::Driver& driver, PhysicalMemory& memory, StreamSync& sync,
              std::uint64_t reservation_bytes, std::uint32_t home, std::uint64_t idle_bytes,
              IdleChunkLender* lender = nullptr, Reclaimer& reclaimer = no_reclaimer(),
              std::uint64_t page_granules = 1, ArenaExtents extents = {});
  ~PackedArena();
  PackedArena(const PackedArena&) = delete;
  PackedArena& operator=(const PackedArena&) = delete;

  vmm::DevicePtr allocate(std::uint64_t size, std::uint32_t stream, std::string* why) override;
  bool free(vmm::DevicePtr ptr, StreamMask used_by) override;
  bool owns(vmm::DevicePtr ptr) const { return live_.count(ptr) != 0; }
  // Unmaps emptied pages whose events completed and gives their chunks back.
  void poll();
  // Pages retired whose unmaps wait for their events (or for the next poll).
  bool unmaps_pending() const { return !pending_.empty() || !deferred_.empty(); }
  // Retires every idle or parked page (a plan install, empty_cache, memory pressure); returns
  // how many.
  std::uint64_t release_idle();
  // Emptied own pages kept mapped from now on; the oldest beyond it are retired.
  void set_idle_bytes(std::uint64_t idle_bytes);
  // Unmaps the idle page emptied longest ago, if its GPU work is done, and puts its chunk in
  // PhysicalMemory's cache for another arena (a chunk of several pages is released instead);
  // the bytes it backed, 0 when there is none.
  std::uint64_t give_idle_chunk();

  std::uint64_t live_bytes() const { return live_bytes_; }
  // Bytes of emptied pages still holding their chunks: the idle ones kept mapped and the retired
  // ones whose unmap waits for the GPU (a scan of those waiting).
  std::uint64_t emptied_bytes() const;
  std::uint64_t mapped_pages() const { return mapped_pages_; }
  std::uint64_t page_bytes() const { return granularity_; }
  // Mapped pages backed by chunks lent from the plan pool.
  std::uint64_t lent_pages() const { return lent_pages_; }
  // Mapped pages on its own chunks whose chunk holds a live allocation (a scan of the pages).
  std::uint64_t occupied_own_pages() const;
  // Entries in the list of emptied pages, stale ones included (bounded by twice the idle pages).
  std::size_t idle_entries() const { return idle_.size(); }

  struct Block {
    vmm::DevicePtr address = 0;
    std::uint64_t size = 0;       // requested
    std::uint64_t bytes = 0;      // taken (aligned)
  };
  // Maximal runs of mapped pages and the live allocations that start inside each.
  struct Run {
    vmm::DevicePtr base = 0;
    std::uint64_t bytes = 0;
    std::vector<Block> blocks;
  };
  std::vector<Run> runs() const;

 private:
  static constexpr std::uint32_t kOwnChunk = UINT32_MAX;
  static constexpr std::uint64_t kNoPlace = UINT64_MAX;
  static constexpr std::uint32_t kNoMarker = FreeMarkers::kNone;
  static constexpr int kPlacementCandidates = 8;
  // A chunk backs an extent of one or more pages, mapped and unmapped as one; its first page
  // (the head) holds the chunk and the extent's state (idle, marker, events, generation).
  struct Page {
    Chunk chunk;                 // the head's, valid while mapped
    std::uint32_t extent = 1;    // the head's: pages its chunk backs
    std::uint32_t from_head = 0;  // pages from the extent's head
    std::uint32_t lent = kOwnChunk;  // the pool chunk it borrowed, or kOwnChunk
    bool parked = false;         // lent, empty, kept mapped
    bool detached = false;       // its chunk went back to the pool; unmapped once events complete
    bool mapped = false;
    bool idle = false;           // empty, kept mapped for reuse
    std::uint32_t tenants = 0;   // live allocations overlapping the page
    StreamMask users = 0;        // streams that used the page since it was mapped
    std::uint64_t generation = 0;  // bumped when a pending unmap is called off
    std::vector<vmm::EventHandle> events;  // pending unmap: the GPU is done when these are
    std::uint32_t marker = kNoMarker;      // idle: when the GPU is done with its last use
  };
  // Pages emptied by a free share its marker (free_markers.h).
  struct Pending {
    std::uint64_t page = 0;
    std::uint64_t generation = 0;
  };
  struct FreeSpan {
    std::uint64_t length = 0;
    StreamMask users = 0;
    StreamSync::FreeStamp freed = 0;  // the users' last free (StreamSync::order_after)
  };
  struct Place {
    std::uint64_t offset = kNoPlace;
    StreamMask users = 0;
    StreamSync::FreeStamp freed = 0;
  };

  bool ensure_reserved(std::string* why);
  // Maps the unmapped pages of [first, last], listing them in mapped_now; on failure unmaps
  // them again and returns false.
  bool map_pages(std::uint64_t first, std::uint64_t last, StreamMask* sync_with,
                 std::vector<std::uint64_t>* mapped_now, std::string* why);
  // The chunk goes back with the streams its users mask names as possibly still running.
  // index: an extent's head; its whole extent is unmapped.
  void unmap_page(std::uint64_t index);
  void return_chunk(const Chunk& chunk, std::uint32_t lent, std::uint64_t extent);
  std::uint64_t head_of(std::uint64_t index) const { return index - pages_[index].from_head; }
  // The last page of the extent headed at `head`.
  std::uint64_t extent_end(std::uint64_t head) const { return head + pages_[head].extent - 1; }
  bool extent_empty(std::uint64_t head) const;
  // Pages a chunk made now may back: 1 below the high water, where chunks made replace ones
  // released (an iteration repeated) and must stay free to move page by page.
  std::uint64_t extent_limit() const;
  // Starts the unmap of an empty page: now if no stream used it, else once its events complete.
  void retire(std::uint64_t index);
  // Where a request of `length` bytes goes, and the streams that used those bytes: among the
  // best-fitting free span and the next larger ones, at a span's start or its end, the place
  // that needs the fewest pages mapped (ties: the best fit, its start). kNoPlace when no span
  // is long enough.
  Place place(std::uint64_t length) const;
  // Unmapped pages under [offset, offset + length), counted up to `enough`.
  std::uint64_t unmapped_pages(std::uint64_t offset, std::uint64_t length,
                               std::uint64_t enough) const;
  // Takes [offset, offset + length), all free, out of the free spans.
  void carve(std::uint64_t offset, std::uint64_t length);
  void insert_span(std::uint64_t offset, std::uint64_t length, StreamMask users,
                   StreamSync::FreeStamp freed);
  void detach(std::uint64_t page) override;
  void add_span(std::uint64_t offset, std::uint64_t length, StreamMask users,
                StreamSync::FreeStamp freed = 0);
  void release_tenancy(std::uint64_t first, std::uint64_t last, StreamMask used_by);
  StreamMask pages_used_by(std::uint64_t first, std::uint64_t last) const;
  void drop_marker(Page& page);
  // Unmaps the idle extent emptied longest ago (none overlapping pages first..last) if its GPU
  // work is done, its chunk going to PhysicalMemory's cache (or released, several pages);
  // the bytes it backed, 0 when there is none.
  std::uint64_t take_idle_chunk(std::uint64_t first, std::uint64_t last);
  // Large pages: a chunk of the page's size for a page of first..last: a spare one, one of the
  // arena's own idle pages whose GPU work is done, or a new one.
  std::optional<Chunk> large_page_chunk(std::uint64_t first, std::uint64_t last);
  // Starts the unmap of the idle page emptied longest ago.
  void retire_oldest_idle();

  vmm::Driver& driver_;
  PhysicalMemory& memory_;
  StreamSync& sync_;
  IdleChunkLender* lender_;
  Reclaimer& reclaimer_;
  std::uint64_t page_granules_;
  std::uint64_t granularity_;  // the page size: page_granules_ granules
  ArenaExtents extents_;
  std::uint64_t reservation_bytes_;
  // Large pages: chunks of unmapped idle pages taken for another page of the arena, and whether
  // unmap_page keeps the chunk there (take_idle_chunk for the arena itself) or releases it.
  std::vector<Chunk> spare_;
  bool keep_unmapped_ = false;
  StreamMask home_;
  vmm::DevicePtr base_ = 0;
  std::vector<Page> pages_;
  std::map<std::uint64_t, FreeSpan> free_by_offset_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> free_by_length_;  // (length, offset)
  std::unordered_map<vmm::DevicePtr, Block> live_;
  std::uint64_t max_idle_pages_;
  std::deque<Pending> idle_;     // emptied pages, oldest first (stale entries skipped)
  std::uint64_t idle_pages_ = 0;
  std::deque<Pending> pending_;  // pages waiting for their events before the unmap
  std::uint64_t live_bytes_ = 0;
  std::uint64_t mapped_pages_ = 0;
  std::uint64_t lent_pages_ = 0;
  // Pages detached while an allocation is being mapped: retired at the next poll, so that the
  // free spans the allocation chose do not change under it.
  bool allocating_ = false;
  std::vector<std::uint64_t> deferred_;
  FreeMarkers markers_;
};

}  // namespace stalloc
