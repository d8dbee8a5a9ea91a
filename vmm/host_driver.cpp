// Host emulation of CUDA VMM, in two flavours that share one set of books (see host_driver.h).
//
// Backed (the default): a physical chunk is a slice of an arena, a 1 GiB memfd (its pages are
// allocated lazily, on first touch, so chunks cost nothing until written); a reservation is a
// PROT_NONE anonymous mapping with MAP_NORESERVE; cuMemMap is an mmap(MAP_FIXED|MAP_SHARED) of
// the arena at the slice's offset over part of the reservation, so a chunk mapped twice shows the
// same bytes at both addresses; cuMemUnmap puts the PROT_NONE placeholder back; cuMemSetAccess is
// mprotect.
//
// Unbacked (backed = false): why it exists. The simulator runs the real runtime against a driver
// for millions of calls; it needs the driver's rules and counters, not its memory, and a syscall
// per call (or a kernel memory area per mapping) would make it slow and bound it by
// vm.max_map_count. So the same books are kept and every call is checked the same way, but the
// few private helpers that touch the address space or the memfds (place_reservation,
// drop_reservation, place_mapping, restore_placeholder, protect, take_slice, give_back_slice) do
// nothing: reservations come from a bump allocator over a fake range that is never reused, so a
// stale pointer never aliases a later reservation.
//
// Why arenas: one memfd per chunk runs into the open-file limit (often 1024 to 20000) long before
// a training plan's tens of thousands of chunks. Slices are handed out best-fit from the free
// extents of all arenas; a chunk larger than an arena gets a memfd of its own. When a chunk's
// memory goes (released, last mapping gone), its slice is hole-punched, which gives the pages back
// to the system and makes the slice read as zeros when reused, as a fresh chunk does; an arena
// with no chunk left is closed.
//
// The driver keeps its own books (chunks, reservations, mappings) and checks every call against
// CUDA's rules before touching the address space, so a call that CUDA would refuse is refused
// here with the same code and leaves nothing changed. The kernel refuses new memory areas past
// vm.max_map_count, in the middle of an munmap or mprotect too; the backed driver therefore counts
// the areas its address space takes and refuses with OutOfMemory before the kernel would. A
// mapping is one area, and each maximal unmapped run of a reservation is one: mapping a chunk into
// the middle of a run splits it in two, mapping next to a neighbour only shortens it, so a
// reservation mapped edge to edge (a plan's slots) costs one area per mapping. The kernel may
// merge neighbours further; the count is an upper bound. Unbacked, there is no area budget.
//
// Lag (HostLag): PendingRecords below keeps, per stream, the records not complete yet, in order,
// each with the queries it still needs and the records (on other streams) it was made to wait
// for. A query counts the queried record and everything it depends on, then completes from the
// front of every stream what is done; so completion is always closed under stream order.
#include "vmm/host_driver.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stalloc::vmm {
namespace {

constexpr std::size_t kAreaMargin = 1024;
constexpr std::size_t kArenaBytes = std::size_t{1} << 30;
constexpr std::size_t kDefaultMaxMapCount = 65530;
constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

std::size_t system_max_map_count() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  std::size_t count = 0;
  if (in >> count && count > 0) return count;
  return kDefaultMaxMapCount;
}

// The memory areas the process has now (a Python process with torch loaded has thousands).
std::size_t process_areas() {
  std::ifstream in("/proc/self/maps");
  std::size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

bool is_power_of_two(std::size_t x) { return x != 0 && (x & (x - 1)) == 0; }

// [ptr, ptr + size) without wrapping around the address space.
bool fits(DevicePtr ptr, std::size_t size) {
  return size <= std::numeric_limits<DevicePtr>::max() - ptr;
}

int protection(Access access) {
  switch (access) {
    case Access::None: return PROT_NONE;
    case Access::Read: return PROT_READ;
    case Access::ReadWrite: return PROT_READ | PROT_WRITE;
  }
  return PROT_NONE;
}

void* as_address(DevicePtr ptr) { return reinterpret_cast<void*>(ptr); }

// splitmix64: small, fast, and the same sequence on every platform (unlike the standard
// distributions), so a seeded lag replays exactly.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound], by rejection: no modulo bias.
  std::uint64_t up_to(std::uint64_t bound) {
    if (bound == std::numeric_limits<std::uint64_t>::max()) return next();
    const std::uint64_t range = bound + 1;
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                                std::numeric_limits<std::uint64_t>::max() % range;
    std::uint64_t x = next();
    while (x >= limit) x = next();
    return x % range;
  }

 private:
  std::uint64_t state_;
};

// The event records of a lagging driver that are not complete yet (HostLag in host_driver.h).
// Per stream, its incomplete records in order; a record is named by (stream, seq), seq counting
// the stream's records from 0, and is complete when its seq is below the stream's first pending
// one. Not thread-safe: the driver's mutex guards it.
class PendingRecords {
 public:
  struct Id {
    std::uint32_t stream = 0;
    std::uint64_t seq = 0;
  };

  explicit PendingRecords(const HostLag& lag) : lag_(lag), rng_(lag.seed) {}

  Id record(StreamHandle handle) {
    const std::uint32_t index = stream_index(handle);
    Stream& stream = streams_[index];
    const auto count = static_cast<std::uint32_t>(
        lag_.seed == 0 ? lag_.queries : rng_.up_to(lag_.queries));
    std::vector<Id> after;
    for (const Id& id : stream.waits) {
      if (!complete(id)) after.push_back(id);
    }
    stream.waits.clear();
    stream.pending.push_back(Entry{time_++, count, std::move(after), stream.clock});
    const Id id{index, stream.next_seq++};
    if (stream.pending.size() > HostLag::kMaxPendingRecords) {
      complete_through(stream.pending.front().time);
    }
    settle();
    return id;
  }

  // The record the next one on handle will be: work enqueued there now is done when it is.
  Id next(StreamHandle handle) {
    const std::uint32_t index = stream_index(handle);
    return {index, streams_[index].next_seq};
  }

  // Whether work enqueued on handle from now on is ordered after `id` (it waited for `id` or a
  // later record of its stream, directly or through records it waited for).
  bool ordered_after(StreamHandle handle, Id id) {
    const std::uint32_t index = stream_index(handle);
    if (index == id.stream || complete(id)) return true;
    const std::vector<std::uint64_t>& clock = streams_[index].clock;
    return id.stream < clock.size() && clock[id.stream] > id.seq;
  }

  // Records made on handle from now on complete only after `id`.
  void wait(StreamHandle handle, Id id) {
    if (complete(id)) return;
    const std::uint32_t index = stream_index(handle);
    if (index == id.stream) return;  // stream order already says so
    // What the awaited record was ordered after, the waiting stream is now too.
    const Stream& from = streams_[id.stream];
    merge(&streams_[index].clock, from.pending[id.seq - from.first_seq].clock);
    std::vector<std::uint64_t>& clock = streams_[index].clock;
    if (clock.size() <= id.stream) clock.resize(id.stream + 1, 0);
    clock[id.stream] = std::max(clock[id.stream], id.seq + 1);
    auto& waits = streams_[index].waits;
    for (Id& w : waits) {
      if (w.stream == id.stream) {
        w.seq = std::max(w.seq, id.seq);
        return;
      }
    }
    waits.push_back(id);
  }

  bool complete(Id id) const { return id.seq < streams_[id.stream].first_seq; }

  // One query of an incomplete record: counts it, the records before it on its stream and, the
  // same way, every record they wait for (each once), then completes what is done.
  void count(Id id) {
    ++epoch_;
    std::vector<Id> work{id};
    while (!work.empty()) {
      const Id at = work.back();
      work.pop_back();
      Stream& stream = streams_[at.stream];
      std::uint64_t seq = stream.first_seq;
      if (stream.counted_epoch == epoch_) seq = std::max(seq, stream.counted_through + 1);
      if (at.seq < seq) continue;
      for (; seq <= at.seq; ++seq) {
        Entry& entry = stream.pending[seq - stream.first_seq];
        if (entry.remaining > 0) --entry.remaining;
        for (const Id& dep : entry.after) {
          if (!complete(dep)) work.push_back(dep);
        }
      }
      stream.counted_epoch = epoch_;
      stream.counted_through = at.seq;
    }
    settle();
  }

  // Completes every record (a device synchronisation).
  void complete_all() {
    for (Stream& stream : streams_) {
      stream.first_seq += stream.pending.size();
      stream.pending.clear();
    }
  }

 private:
  struct Entry {
    std::uint64_t time;          // order of all records, over every stream
    std::uint32_t remaining;     // queries still needed
    std::vector<Id> after;       // records on other streams it waits for
    std::vector<std::uint64_t> clock;  // its stream's clock when it was made
  };
  struct Stream {
    std::deque<Entry> pending;   // seqs first_seq, first_seq + 1, ...
    std::uint64_t first_seq = 0;
    std::uint64_t next_seq = 0;
    std::vector<Id> waits;       // for the next record: the latest per stream
    std::uint64_t counted_epoch = 0;    // the query that last counted this stream's records,
    std::uint64_t counted_through = 0;  // up to this seq
    // By stream index: one past the latest record of that stream this one's work is ordered
    // after (a vector clock, for gpu_use's checks).
    std::vector<std::uint64_t> clock;
  };

  static void merge(std::vector<std::uint64_t>* into, const std::vector<std::uint64_t>& from) {
    if (into->size() < from.size()) into->resize(from.size(), 0);
    for (std::size_t i = 0; i < from.size(); ++i) (*into)[i] = std::max((*into)[i], from[i]);
  }

  std::uint32_t stream_index(StreamHandle handle) {
    auto [it, added] = index_.try_emplace(handle, static_cast<std::uint32_t>(streams_.size()));
    if (added) streams_.emplace_back();
    return it->second;
  }

  // Completes the front records of every stream that need no query more and wait for nothing
  // incomplete, until none is left. Records wait only for older ones, so this ends.
  void settle() {
    for (bool progress = true; progress;) {
      progress = false;
      for (Stream& stream : streams_) {
        while (!stream.pending.empty() && stream.pending.front().remaining == 0 &&
               std::all_of(stream.pending.front().after.begin(),
                           stream.pending.front().after.end(),
                           [this](const Id& dep) { return complete(dep); })) {
          stream.pending.pop_front();
          ++stream.first_seq;
          progress = true;
        }
      }
    }
  }

  // Completes every record made at or before `time`: a set closed under stream order, since a
  // record waits only for older ones.
  void complete_through(std::uint64_t time) {
    for (Stream& stream : streams_) {
      while (!stream.pending.empty() && stream.pending.front().time <= time) {
        stream.pending.pop_front();
        ++stream.first_seq;
      }
    }
  }

  const HostLag lag_;
  SplitMix64 rng_;
  std::unordered_map<StreamHandle, std::uint32_t> index_;
  std::vector<Stream> streams_;
  std::uint64_t time_ = 0;
  std::uint64_t epoch_ = 0;
};

class HostDriver final : public Driver {
 public:
  HostDriver(const HostDriverOptions& options, std::size_t area_budget)
      : granularity_(options.granularity),
        max_bytes_(options.max_bytes),
        device_(options.device),
        devices_(std::max(options.devices, options.device + 1)),
        backed_(options.backed),
        lagging_(options.lag.queries > 0),
        area_budget_(area_budget),
        max_mappings_(options.max_mappings != 0 ? options.max_mappings : area_budget),
        arena_bytes_(std::max(kArenaBytes, options.granularity)),
        pending_(options.lag) {}

  ~HostDriver() override {
    // Whatever the caller leaked goes with the driver: a reservation's munmap also removes the
    // mappings inside it.
    for (const auto& [ptr, size] : reservations_) drop_reservation(ptr, size);
    for (const auto& [id, arena] : arenas_) close(arena.fd);
  }

  HostDriver(const HostDriver&) = delete;
  HostDriver& operator=(const HostDriver&) = delete;

  std::string_view name() const override { return "host"; }
  int device() const override { return device_; }
  bool host_accessible() const override { return backed_; }

  // The emulated device holds max_bytes; when unlimited, the machine's memory (backed) or
  // kUnbackedTotalMemory.
  Status total_memory(std::size_t* out) override {
    if (out == nullptr) return Status::InvalidValue;
    if (max_bytes_ != 0) {
      *out = max_bytes_;
      return Status::Success;
    }
    if (!backed_) {
      *out = HostDriverOptions::kUnbackedTotalMemory;
      return Status::Success;
    }
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return Status::NotSupported;
    *out = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
    return Status::Success;
  }

  // Only max_bytes is a limit the emulation keeps; the machine's memory is a size it reports.
  bool total_memory_enforced() const override { return max_bytes_ != 0; }

  Status granularity(std::size_t* out) override {
    if (out == nullptr) return Status::InvalidValue;
    *out = granularity_;
    return Status::Success;
  }

  Status create(ChunkHandle* out, std::size_t size) override {
    if (out == nullptr || !aligned(size) || size == 0) return Status::InvalidValue;
    std::lock_guard lock(mu_);
    if (max_bytes_ != 0 && size > max_bytes_ - std::min(max_bytes_, counters_.chunk_bytes)) {
      return Status::OutOfMemory;
    }
    Slice slice;
    if (!take_slice(size, &slice)) return Status::OutOfMemory;
    const ChunkHandle handle = next_handle_++;
    chunks_.emplace(handle, Chunk{slice, size, false, 0});
    ++counters_.creates;
    ++counters_.live_chunks;
    counters_.chunk_bytes += size;
    counters_.peak_chunk_bytes = std::max(counters_.peak_chunk_bytes, counters_.chunk_bytes);
    *out = handle;
    return Status::Success;
  }

  Status release(ChunkHandle handle) override {
    std::lock_guard lock(mu_);
    auto it = chunks_.find(handle);
    if (it == chunks_.end() || it->second.released) return Status::InvalidHandle;
    it->second.released = true;
    ++counters_.releases;
    // As in CUDA, the memory stays while a mapping still refers to it.
    if (it->second.mappings == 0) destroy_chunk(it);
    return Status::Success;
  }

  Status reserve(DevicePtr* out, std::size_t size, std::size_t alignment) override {
    if (alignment == 0) alignment = granularity_;
    if (out == nullptr || !aligned(size) || size == 0 || !is_power_of_two(alignment) ||
        !aligned(alignment)) {
      return Status::InvalidValue;
    }
    std::lock_guard lock(mu_);
    if (areas() + 1 > area_budget_) return Status::OutOfMemory;
    DevicePtr base = 0;
    if (const Status s = place_reservation(size, alignment, &base); s != Status::Success) {
      return s;
    }
    reservations_.emplace(base, size);
    ++gap_areas_;
    ++counters_.reserves;
    ++counters_.live_reservations;
    *out = base;
    return Status::Success;
  }

  Status free_reservation(DevicePtr ptr, std::size_t size) override {
    std::lock_guard lock(mu_);
    auto it = reservations_.find(ptr);
    if (it == reservations_.end() || it->second != size) return Status::InvalidValue;
    if (any_mapping_in(ptr, size)) return Status::InvalidValue;
    if (!drop_reservation(ptr, size)) return Status::Unknown;
    reservations_.erase(it);
    --gap_areas_;
    ++counters_.frees;
    --counters_.live_reservations;
    return Status::Success;
  }

  Status map(DevicePtr ptr, std::size_t size, std::size_t offset, ChunkHandle handle) override {
    // cuMemMap: "offset ... currently must be zero".
    if (!aligned(ptr) || !aligned(size) || offset != 0 || size == 0 || !fits(ptr, size)) {
      return Status::InvalidValue;
    }
    std::lock_guard lock(mu_);
    auto chunk = chunks_.find(handle);
    if (chunk == chunks_.end() || chunk->second.released) return Status::InvalidHandle;
    if (!inside_reservation(ptr, size) || any_mapping_in(ptr, size)) return Status::InvalidValue;
    // CUDA maps a handle whole (an H200, driver 580: CUDA_ERROR_NOT_SUPPORTED for part of one).
    if (size != chunk->second.size) return Status::NotSupported;
    // The mapping takes one area and the run it lands in becomes `gaps` runs.
    const std::size_t gaps = bordering_gaps(ptr, size);
    if (counters_.live_mappings >= max_mappings_ || areas() + gaps > area_budget_) {
      return Status::OutOfMemory;
    }
    if (!place_mapping(ptr, size, chunk->second.slice)) {
      // A failed MAP_FIXED may have dropped the placeholder: put it back.
      restore_placeholder(ptr, size);
      return Status::OutOfMemory;
    }
    mappings_.emplace(ptr, MappedRange{size, handle});
    gap_areas_ = gap_areas_ + gaps - 1;
    ++chunk->second.mappings;
    ++counters_.maps;
    ++counters_.live_mappings;
    counters_.peak_live_mappings = std::max(counters_.peak_live_mappings, counters_.live_mappings);
    return Status::Success;
  }

  Status unmap(DevicePtr ptr, std::size_t size) override {
    std::lock_guard lock(mu_);
    auto it = mappings_.find(ptr);
    if (it == mappings_.end() || it->second.size != size) return Status::InvalidValue;
    if (!restore_placeholder(ptr, size)) return Status::Unknown;
    auto chunk = chunks_.find(it->second.chunk);
    if (lagging_) check_unmap(it->second.chunk, ptr, ptr + size);
    mappings_.erase(it);
    // The runs on either side and the unmapped range become one run.
    gap_areas_ = gap_areas_ + 1 - bordering_gaps(ptr, size);
    ++counters_.unmaps;
    --counters_.live_mappings;
    if (--chunk->second.mappings == 0 && chunk->second.released) destroy_chunk(chunk);
    return Status::Success;
  }

  Status set_access(DevicePtr ptr, std::size_t size, Access access) override {
    if (!aligned(ptr) || !aligned(size) || size == 0 || !fits(ptr, size)) {
      return Status::InvalidValue;
    }
    std::lock_guard lock(mu_);
    // Whole mappings only, back to back: then mprotect never splits an area.
    DevicePtr cursor = ptr;
    while (cursor < ptr + size) {
      auto it = mappings_.find(cursor);
      if (it == mappings_.end()) return Status::InvalidValue;
      cursor += it->second.size;
    }
    if (cursor != ptr + size) return Status::InvalidValue;
    if (!protect(ptr, size, access)) return Status::OutOfMemory;
    ++counters_.set_accesses;
    counters_.set_access_bytes += size * (1 + peers_.size());
    return Status::Success;
  }

  Status accessible_peers(std::vector<int>* out) override {
    if (out == nullptr) return Status::InvalidValue;
    out->clear();
    for (int d = 0; d < devices_; ++d) {
      if (d != device_) out->push_back(d);
    }
    return Status::Success;
  }

  Status set_peers(const std::vector<int>& devices) override {
    for (int d : devices) {
      if (d < 0 || d >= devices_ || d == device_) return Status::InvalidDevice;
    }
    std::lock_guard lock(mu_);
    peers_ = devices;
    return Status::Success;
  }

  Status event_create(EventHandle* out) override {
    if (out == nullptr) return Status::InvalidValue;
    std::lock_guard lock(mu_);
    const EventHandle event = next_handle_++;
    events_.emplace(event, Event{});
    ++counters_.event_creates;
    ++counters_.live_events;
    *out = event;
    return Status::Success;
  }

  Status event_destroy(EventHandle event) override {
    std::lock_guard lock(mu_);
    if (events_.erase(event) == 0) return Status::InvalidHandle;
    ++counters_.event_destroys;
    --counters_.live_events;
    return Status::Success;
  }

  // Without lag the host runs everything synchronously: a recorded event is complete at once.
  Status event_record(EventHandle event, StreamHandle stream) override {
    std::lock_guard lock(mu_);
    auto it = events_.find(event);
    if (it == events_.end()) return Status::InvalidHandle;
    if (lagging_) it->second = Event{true, pending_.record(stream)};
    ++counters_.event_records;
    return Status::Success;
  }

  // CUDA also answers Success for an event never recorded.
  Status event_query(EventHandle event) override {
    std::lock_guard lock(mu_);
    auto it = events_.find(event);
    if (it == events_.end()) return Status::InvalidHandle;
    ++counters_.event_queries;
    const Event& e = it->second;
    if (!e.recorded || pending_.complete(e.record)) return Status::Success;
    pending_.count(e.record);
    return Status::NotReady;
  }

  Status gpu_use(StreamHandle stream, DevicePtr ptr, std::size_t size) override {
    std::lock_guard lock(mu_);
    if (!lagging_ || size == 0) return Status::Success;
    const PendingRecords::Id done_with = pending_.next(stream);
    auto it = mappings_.upper_bound(ptr);
    if (it == mappings_.begin()) return Status::InvalidValue;
    --it;
    for (DevicePtr at = ptr; at < ptr + size; ++it) {
      if (it == mappings_.end() || it->first > at || it->first + it->second.size <= at) {
        return Status::InvalidValue;  // a byte not mapped: the kernel would fault
      }
      const DevicePtr piece_end = std::min(ptr + size, it->first + it->second.size);
      const GpuUse use{at, piece_end, at - it->first, piece_end - it->first, done_with};
      std::vector<GpuUse>& uses = uses_[it->second.chunk];
      std::erase_if(uses, [&](const GpuUse& u) { return pending_.complete(u.done_with); });
      GpuUse* same = nullptr;  // a use of touching bytes through the same view, done as late
      for (GpuUse& u : uses) {
        if (u.offset < use.offset_end && use.offset < u.offset_end &&
            !pending_.ordered_after(stream, u.done_with)) {
          ++counters_.unguarded_uses;
        }
        if (same == nullptr && u.done_with.stream == done_with.stream &&
            u.done_with.seq == done_with.seq && u.address_end > u.address &&
            u.address - u.offset == use.address - use.offset && u.offset <= use.offset_end &&
            use.offset <= u.offset_end) {
          same = &u;
        }
      }
      // Kept as one use, so that the uses of a chunk that no record completes (a planned
      // iteration queries nothing) do not pile up: the union is exactly the bytes both touch.
      if (same != nullptr) {
        same->offset = std::min(same->offset, use.offset);
        same->offset_end = std::max(same->offset_end, use.offset_end);
        same->address = std::min(same->address, use.address);
        same->address_end = std::max(same->address_end, use.address_end);
      } else {
        uses.push_back(use);
      }
      at = piece_end;
    }
    return Status::Success;
  }

  Status stream_wait_event(StreamHandle stream, EventHandle event) override {
    std::lock_guard lock(mu_);
    auto it = events_.find(event);
    if (it == events_.end()) return Status::InvalidHandle;
    if (it->second.recorded) pending_.wait(stream, it->second.record);
    ++counters_.stream_waits;
    return Status::Success;
  }

  // Every recorded event is complete afterwards: what a device synchronisation gives on a GPU.
  Status synchronize() override {
    std::lock_guard lock(mu_);
    if (lagging_) pending_.complete_all();
    uses_.clear();  // every kernel enqueued has run
    ++counters_.synchronizes;
    return Status::Success;
  }

  Status stream_is_capturing(StreamHandle stream, bool* capturing) override {
    if (capturing == nullptr) return Status::InvalidValue;
    std::lock_guard lock(mu_);
    ++counters_.capture_queries;
    *capturing = captured_.contains(stream);
    return Status::Success;
  }

  Status set_capturing(StreamHandle stream, bool capturing) {
    if (stream == 0) return Status::InvalidValue;
    std::lock_guard lock(mu_);
    if (capturing) {
      captured_.insert(stream);
    } else {
      captured_.erase(stream);
    }
    return Status::Success;
  }

  // Handles far above the small stream numbers traces and tests use as handles.
  Status stream_create(StreamHandle* out) override {
    if (out == nullptr) return Status::InvalidValue;
    std::lock_guard lock(mu_);
    const StreamHandle stream = kFirstCreatedStream + next_stream_++;
    streams_.insert(stream);
    *out = stream;
    return Status::Success;
  }

  Status stream_destroy(StreamHandle stream) override {
    std::lock_guard lock(mu_);
    return streams_.erase(stream) == 1 ? Status::Success : Status::InvalidHandle;
  }

  // The kernel's memory areas bound the backed driver's mappings (each mapping is one, and the
  // unmapped runs between them take more); max_mappings bounds both.
  std::size_t mapping_limit() const override {
    const std::size_t limit = std::min(max_mappings_, area_budget_);
    return limit == kUnlimited ? 0 : limit;
  }

  DriverCounters counters() const override {
    std::lock_guard lock(mu_);
    return counters_;
  }

 private:
  // A memfd that chunks are sliced from; free maps offset -> length of the extents not in use,
  // coalesced. A dedicated arena holds one chunk larger than arena_bytes_ and has no free extents.
  struct Arena {
    int fd;
    std::size_t used;  // bytes of live chunks, plus slices that could not be zeroed
    std::map<std::size_t, std::size_t> free;
  };
  struct Slice {
    std::uint64_t arena = 0;
    std::size_t offset = 0;
  };
  struct Chunk {
    Slice slice;  // unbacked: none
    std::size_t size;
    bool released;         // the handle is gone; the memory lives while mapped
    std::size_t mappings;  // live mappings of this chunk
  };
  struct MappedRange {
    std::size_t size;
    ChunkHandle chunk;
  };
  struct Event {
    bool recorded = false;  // only when lagging
    PendingRecords::Id record;
  };

  static std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

  bool aligned(std::size_t x) const { return x % granularity_ == 0; }

  std::size_t areas() const { return gap_areas_ + counters_.live_mappings; }

  // Unmapped runs of its reservation that border [ptr, ptr + size) (which is unmapped, or about
  // to be): 0, 1 or 2.
  std::size_t bordering_gaps(DevicePtr ptr, std::size_t size) const {
    auto res = std::prev(reservations_.upper_bound(ptr));
    std::size_t gaps = 0;
    if (ptr > res->first) {
      auto before = mappings_.lower_bound(ptr);
      const bool mapped_before = before != mappings_.begin() &&
                                 std::prev(before)->first + std::prev(before)->second.size == ptr;
      if (!mapped_before) ++gaps;
    }
    if (ptr + size < res->first + res->second && mappings_.count(ptr + size) == 0) ++gaps;
    return gaps;
  }

  bool inside_reservation(DevicePtr ptr, std::size_t size) const {
    auto it = reservations_.upper_bound(ptr);
    if (it == reservations_.begin()) return false;
    --it;
    return ptr - it->first < it->second && size <= it->second - (ptr - it->first);
  }

  bool any_mapping_in(DevicePtr ptr, std::size_t size) const {
    auto it = mappings_.lower_bound(ptr);
    if (it != mappings_.end() && it->first < ptr + size) return true;
    if (it == mappings_.begin()) return false;
    --it;
    return it->first + it->second.size > ptr;
  }

  // The address space: the only places, with the memfds below, that make syscalls, each a no-op
  // (or the fake range's bump allocator) when unbacked.

  // A PROT_NONE placeholder of size bytes at a multiple of alignment.
  Status place_reservation(std::size_t size, std::size_t alignment, DevicePtr* out) {
    if (!backed_) {
      // Never reused; a granule's gap after each, so one past the end is in no reservation.
      const DevicePtr base = (next_fake_ + alignment - 1) & ~(alignment - 1);
      if (base < next_fake_ || !fits(base, size) || !fits(base + size, granularity_)) {
        return Status::OutOfMemory;
      }
      next_fake_ = base + size + granularity_;
      *out = base;
      return Status::Success;
    }
    const std::size_t slack = alignment - page_size();
    if (size > std::numeric_limits<std::size_t>::max() - slack) return Status::InvalidValue;
    void* raw = mmap(nullptr, size + slack, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (raw == MAP_FAILED) return Status::OutOfMemory;
    const auto start = reinterpret_cast<DevicePtr>(raw);
    const DevicePtr base = (start + alignment - 1) & ~(alignment - 1);
    // Trim the over-allocation on both sides; trimming splits nothing.
    if (base > start) munmap(raw, base - start);
    const std::size_t tail = start + size + slack - (base + size);
    if (tail > 0) munmap(as_address(base + size), tail);
    *out = base;
    return Status::Success;
  }

  bool drop_reservation(DevicePtr ptr, std::size_t size) {
    return !backed_ || munmap(as_address(ptr), size) == 0;
  }

  bool place_mapping(DevicePtr ptr, std::size_t size, const Slice& slice) {
    if (!backed_) return true;
    return mmap(as_address(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                arenas_.at(slice.arena).fd, static_cast<off_t>(slice.offset)) != MAP_FAILED;
  }

  bool restore_placeholder(DevicePtr ptr, std::size_t size) {
    if (!backed_) return true;
    return mmap(as_address(ptr), size, PROT_NONE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED;
  }

  bool protect(DevicePtr ptr, std::size_t size, Access access) {
    return !backed_ || mprotect(as_address(ptr), size, protection(access)) == 0;
  }

  static int new_memfd(std::size_t size) {
    const int fd = memfd_create("stalloc-chunks", MFD_CLOEXEC);
    if (fd < 0) return -1;
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  // The smallest free extent that holds size, lowest arena and offset first, so that later
  // arenas empty out and get closed; a new arena when none holds it. Unbacked: no slice.
  bool take_slice(std::size_t size, Slice* out) {
    if (!backed_) return true;
    if (size > arena_bytes_) {
      const int fd = new_memfd(size);
      if (fd < 0) return false;
      *out = Slice{next_arena_++, 0};
      arenas_.emplace(out->arena, Arena{fd, size, {}});
      return true;
    }
    auto fit = free_extents_.lower_bound({size, 0, 0});
    if (fit == free_extents_.end()) {
      const int fd = new_memfd(arena_bytes_);
      if (fd < 0) return false;
      const std::uint64_t id = next_arena_++;
      arenas_.emplace(id, Arena{fd, 0, {}});
      add_free_extent(id, 0, arena_bytes_);
      fit = free_extents_.lower_bound({size, 0, 0});
    }
    const auto [length, id, offset] = *fit;
    free_extents_.erase(fit);
    Arena& arena = arenas_.at(id);
    arena.free.erase(offset);
    if (length > size) add_free_extent(id, offset + size, length - size);
    arena.used += size;
    *out = Slice{id, offset};
    return true;
  }

  void add_free_extent(std::uint64_t id, std::size_t offset, std::size_t length) {
    arenas_.at(id).free.emplace(offset, length);
    free_extents_.emplace(length, id, offset);
  }

  void give_back_slice(const Slice& slice, std::size_t size) {
    if (!backed_) return;
    auto arena = arenas_.find(slice.arena);
    Arena& a = arena->second;
    a.used -= size;
    if (a.used == 0) {
      for (const auto& [offset, length] : a.free) free_extents_.erase({length, slice.arena, offset});
      close(a.fd);
      arenas_.erase(arena);
      return;
    }
    // A slice whose pages cannot be dropped would not read as zeros: it stays out of use for the
    // arena's life. shmem has supported hole punching since Linux 3.5.
    if (fallocate(a.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(slice.offset), static_cast<off_t>(size)) != 0) {
      a.used += size;
      return;
    }
    std::size_t offset = slice.offset;
    std::size_t length = size;
    auto next = a.free.lower_bound(offset);
    if (next != a.free.end() && next->first == offset + length) {
      length += next->second;
      free_extents_.erase({next->second, slice.arena, next->first});
      next = a.free.erase(next);
    }
    if (next != a.free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        length += prev->second;
        free_extents_.erase({prev->second, slice.arena, prev->first});
        a.free.erase(prev);
      }
    }
    add_free_extent(slice.arena, offset, length);
  }

  // Work still pending on the unmapped addresses would fault on a GPU.
  void check_unmap(ChunkHandle chunk, DevicePtr lo, DevicePtr hi) {
    auto found = uses_.find(chunk);
    if (found == uses_.end()) return;
    for (GpuUse& u : found->second) {
      if (u.address >= hi || lo >= u.address_end) continue;
      if (!pending_.complete(u.done_with)) ++counters_.unguarded_uses;
      u.address_end = u.address;  // those addresses are gone: counted once
    }
  }

  void destroy_chunk(std::map<ChunkHandle, Chunk>::iterator it) {
    uses_.erase(it->first);
    give_back_slice(it->second.slice, it->second.size);
    counters_.chunk_bytes -= it->second.size;
    --counters_.live_chunks;
    chunks_.erase(it);
  }

  const std::size_t granularity_;
  const std::size_t max_bytes_;
  const int device_;
  const int devices_;
  const bool backed_;
  const bool lagging_;
  const std::size_t area_budget_;  // unbacked: kUnlimited
  const std::size_t max_mappings_;
  const std::size_t arena_bytes_;

  static constexpr StreamHandle kFirstCreatedStream = StreamHandle{1} << 32;

  mutable std::mutex mu_;
  std::vector<int> peers_;
  std::set<StreamHandle> streams_;  // made by stream_create, not yet destroyed
  std::set<StreamHandle> captured_;  // being captured (host_set_capturing)
  std::uint64_t next_stream_ = 0;
  std::uint64_t next_handle_ = 1;
  std::uint64_t next_arena_ = 1;
  DevicePtr next_fake_ = HostDriverOptions::kUnbackedBase;  // unbacked: the next free address
  std::map<std::uint64_t, Arena> arenas_;
  // Every arena's free extents as (length, arena, offset): best fit is a lower_bound.
  std::set<std::tuple<std::size_t, std::uint64_t, std::size_t>> free_extents_;
  std::map<ChunkHandle, Chunk> chunks_;
  std::map<DevicePtr, std::size_t> reservations_;  // start -> size
  std::map<DevicePtr, MappedRange> mappings_;      // start -> range
  // gpu_use's uses not known complete, by chunk: the addresses and the chunk's bytes used.
  struct GpuUse {
    DevicePtr address = 0;
    DevicePtr address_end = 0;
    std::size_t offset = 0;
    std::size_t offset_end = 0;
    PendingRecords::Id done_with;
  };
  std::unordered_map<ChunkHandle, std::vector<GpuUse>> uses_;
  std::unordered_map<EventHandle, Event> events_;
  PendingRecords pending_;
  DriverCounters counters_;
  std::size_t gap_areas_ = 0;  // unmapped runs of the reservations
};

}  // namespace

Status host_set_capturing(Driver& driver, StreamHandle stream, bool capturing) {
  auto* host = dynamic_cast<HostDriver*>(&driver);
  return host != nullptr ? host->set_capturing(stream, capturing) : Status::NotSupported;
}

std::unique_ptr<Driver> make_host_driver(const HostDriverOptions& options) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (!is_power_of_two(options.granularity) || options.granularity % page != 0) {
    throw DriverUnavailable("host driver: granularity " + std::to_string(options.granularity) +
                            " must be a power of two and a multiple of the page size (" +
                            std::to_string(page) + ")");
  }
  if (!options.backed) return std::make_unique<HostDriver>(options, kUnlimited);
  const std::size_t max_map_count = system_max_map_count();
  const std::size_t in_use = process_areas() + kAreaMargin;
  const std::size_t area_budget =
      max_map_count > 2 * in_use ? max_map_count - in_use : max_map_count / 2;
  return std::make_unique<HostDriver>(options, area_budget);
}

}  // namespace stalloc::vmm
