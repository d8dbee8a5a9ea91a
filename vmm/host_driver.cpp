// Host emulation of CUDA VMM. A physical chunk is a memfd (its pages are allocated lazily, on
// first touch, so large chunks cost nothing until written); a reservation is a PROT_NONE
// anonymous mapping with MAP_NORESERVE; cuMemMap is an mmap(MAP_FIXED|MAP_SHARED) of the memfd
// over part of the reservation, so a chunk mapped twice shows the same bytes at both addresses;
// cuMemUnmap puts the PROT_NONE placeholder back; cuMemSetAccess is mprotect.
//
// The driver keeps its own books (chunks, reservations, mappings) and checks every call against
// CUDA's rules before touching the address space, so a call that CUDA would refuse is refused
// here with the same code and leaves nothing changed. Every mapping can add two kernel memory
// areas (it splits its reservation), and the kernel refuses new areas past vm.max_map_count, in
// the middle of an munmap or mprotect too; the driver therefore counts areas and refuses with
// OutOfMemory well before the kernel would.
#include "vmm/host_driver.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace stalloc::vmm {
namespace {

constexpr std::size_t kAreaMargin = 1024;
constexpr std::size_t kDefaultMaxMapCount = 65530;

std::size_t system_max_map_count() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  std::size_t count = 0;
  if (in >> count && count > 0) return count;
  return kDefaultMaxMapCount;
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

class HostDriver final : public Driver {
 public:
  HostDriver(const HostDriverOptions& options, std::size_t area_budget)
      : granularity_(options.granularity),
        max_bytes_(options.max_bytes),
        device_(options.device),
        area_budget_(area_budget),
        max_mappings_(options.max_mappings != 0 ? options.max_mappings : area_budget / 2) {}

  ~HostDriver() override {
    // Whatever the caller leaked goes with the driver: a reservation's munmap also removes the
    // mappings inside it.
    for (const auto& [ptr, size] : reservations_) munmap(as_address(ptr), size);
    for (const auto& [handle, chunk] : chunks_) close(chunk.fd);
  }

  HostDriver(const HostDriver&) = delete;
  HostDriver& operator=(const HostDriver&) = delete;

  std::string_view name() const override { return "host"; }
  int device() const override { return device_; }
  bool host_accessible() const override { return true; }

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
    const int fd = memfd_create("stalloc-chunk", MFD_CLOEXEC);
    if (fd < 0) return Status::OutOfMemory;
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
      close(fd);
      return Status::OutOfMemory;
    }
    const ChunkHandle handle = next_handle_++;
    chunks_.emplace(handle, Chunk{fd, size, false, 0});
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
    reservations_.emplace(base, size);
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
    if (munmap(as_address(ptr), size) != 0) return Status::Unknown;
    reservations_.erase(it);
    ++counters_.frees;
    --counters_.live_reservations;
    return Status::Success;
  }

  Status map(DevicePtr ptr, std::size_t size, std::size_t offset, ChunkHandle handle) override {
    if (!aligned(ptr) || !aligned(size) || !aligned(offset) || size == 0 || !fits(ptr, size)) {
      return Status::InvalidValue;
    }
    std::lock_guard lock(mu_);
    auto chunk = chunks_.find(handle);
    if (chunk == chunks_.end() || chunk->second.released) return Status::InvalidHandle;
    if (offset > chunk->second.size || size > chunk->second.size - offset) {
      return Status::InvalidValue;
    }
    if (!inside_reservation(ptr, size) || any_mapping_in(ptr, size)) return Status::InvalidValue;
    if (counters_.live_mappings >= max_mappings_ || areas() + 2 > area_budget_) {
      return Status::OutOfMemory;
    }
    void* placed = mmap(as_address(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, chunk->second.fd,
                        static_cast<off_t>(offset));
    if (placed == MAP_FAILED) {
      // A failed MAP_FIXED may have dropped the placeholder: put it back.
      restore_placeholder(ptr, size);
      return Status::OutOfMemory;
    }
    mappings_.emplace(ptr, MappedRange{size, handle});
    ++chunk->second.mappings;
    ++counters_.maps;
    ++counters_.live_mappings;
    return Status::Success;
  }

  Status unmap(DevicePtr ptr, std::size_t size) override {
    std::lock_guard lock(mu_);
    auto it = mappings_.find(ptr);
    if (it == mappings_.end() || it->second.size != size) return Status::InvalidValue;
    if (!restore_placeholder(ptr, size)) return Status::Unknown;
    auto chunk = chunks_.find(it->second.chunk);
    mappings_.erase(it);
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
    if (mprotect(as_address(ptr), size, protection(access)) != 0) return Status::OutOfMemory;
    ++counters_.set_accesses;
    return Status::Success;
  }

  Status event_create(EventHandle* out) override {
    if (out == nullptr) return Status::InvalidValue;
    std::lock_guard lock(mu_);
    const EventHandle event = next_handle_++;
    events_.insert(event);
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

  // The host runs everything synchronously: a recorded event is complete at once.
  Status event_record(EventHandle event, StreamHandle) override {
    std::lock_guard lock(mu_);
    if (!events_.contains(event)) return Status::InvalidHandle;
    ++counters_.event_records;
    return Status::Success;
  }

  // CUDA also answers Success for an event never recorded.
  Status event_query(EventHandle event) override {
    std::lock_guard lock(mu_);
    if (!events_.contains(event)) return Status::InvalidHandle;
    ++counters_.event_queries;
    return Status::Success;
  }

  Status stream_wait_event(StreamHandle, EventHandle event) override {
    std::lock_guard lock(mu_);
    if (!events_.contains(event)) return Status::InvalidHandle;
    ++counters_.stream_waits;
    return Status::Success;
  }

  DriverCounters counters() const override {
    std::lock_guard lock(mu_);
    return counters_;
  }

 private:
  struct Chunk {
    int fd;
    std::size_t size;
    bool released;         // the handle is gone; the memory lives while mapped
    std::size_t mappings;  // live mappings of this chunk
  };
  struct MappedRange {
    std::size_t size;
    ChunkHandle chunk;
  };

  static std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

  bool aligned(std::size_t x) const { return x % granularity_ == 0; }

  std::size_t areas() const { return counters_.live_reservations + 2 * counters_.live_mappings; }

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

  bool restore_placeholder(DevicePtr ptr, std::size_t size) {
    return mmap(as_address(ptr), size, PROT_NONE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED;
  }

  void destroy_chunk(std::map<ChunkHandle, Chunk>::iterator it) {
    close(it->second.fd);
    counters_.chunk_bytes -= it->second.size;
    --counters_.live_chunks;
    chunks_.erase(it);
  }

  const std::size_t granularity_;
  const std::size_t max_bytes_;
  const int device_;
  const std::size_t area_budget_;
  const std::size_t max_mappings_;

  mutable std::mutex mu_;
  std::uint64_t next_handle_ = 1;
  std::map<ChunkHandle, Chunk> chunks_;
  std::map<DevicePtr, std::size_t> reservations_;  // start -> size
  std::map<DevicePtr, MappedRange> mappings_;      // start -> range
  std::set<EventHandle> events_;
  DriverCounters counters_;
};

}  // namespace

std::unique_ptr<Driver> make_host_driver(const HostDriverOptions& options) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (!is_power_of_two(options.granularity) || options.granularity % page != 0) {
    throw DriverUnavailable("host driver: granularity " + std::to_string(options.granularity) +
                            " must be a power of two and a multiple of the page size (" +
                            std::to_string(page) + ")");
  }
  const std::size_t max_map_count = system_max_map_count();
  const std::size_t area_budget =
      max_map_count > 2 * kAreaMargin ? max_map_count - kAreaMargin : max_map_count / 2;
  return std::make_unique<HostDriver>(options, area_budget);
}

}  // namespace stalloc::vmm
