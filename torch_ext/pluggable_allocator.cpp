// libstalloc_torch.so: the C ABI that torch.cuda.memory.CUDAPluggableAllocator loads, plus the
// calls the Python package (torch_ext/python/stalloc) makes through ctypes.
//
// PyTorch gives the allocator no context pointer, so the runtimes live in process-wide state:
// one Runtime per device, created on the first request for that device with the configuration
// stalloc_configure stored. Functions with an error buffer return 0 on success and write a
// message otherwise. Only stalloc_malloc and stalloc_begin_allocate_to_pool throw: PyTorch does
// not check the pointer an allocator returns (a nullptr would fail later as an illegal address in
// some kernel), so a failed allocation raises, as PyTorch's own allocator does. ctypes callers
// must not make them fail.
//
// This library holds no policy: what is tried before a request fails, and PyTorch's statistics
// (torch.cuda.memory_stats: allocations and requested bytes per pool), are the runtime's
// (src/runtime.h). It keeps the runtimes by device and which runtime owns a pointer.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/json.h"
#include "common/units.h"
#include "src/runtime.h"
#include "src/runtime_config.h"
#include "src/runtime_stats.h"
#include "src/runtime_driver.h"
#include "vmm/host_driver.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace {

constexpr int kMaxDevices = 64;
// How long a failed allocation waits for frees of other threads (RuntimeConfig::oom_wait_seconds)
// unless stalloc.set_oom_wait says otherwise.
constexpr double kDefaultOomWaitSeconds = 1.2;

using OomThrower = void (*)(const char* message);

struct Process {
  std::mutex mutex;
  stalloc::RuntimeConfig config;
  bool configured = false;
  stalloc::vmm::HostLag host_lag;  // backend:host only (tests)
  std::array<std::unique_ptr<stalloc::vmm::Driver>, kMaxDevices> drivers;
  std::array<std::unique_ptr<stalloc::Runtime>, kMaxDevices> runtimes;
  // The runtimes once made, read without the mutex on every request.
  std::array<std::atomic<stalloc::Runtime*>, kMaxDevices> ready{};
  std::array<bool, kMaxDevices> failed{};
  // record_stream names a pointer but not its device. While one runtime exists it owns every
  // pointer; once a second one is made, live pointers are registered with their device, and a
  // pointer not registered was served before that, by the first.
  int first_device = -1;
  std::atomic<bool> several{false};
  std::mutex owners_mutex;
  std::unordered_map<void*, int> owners;
  std::atomic<OomThrower> oom_thrower{nullptr};
  std::atomic<double> oom_wait_seconds{kDefaultOomWaitSeconds};
};

// Never destroyed, as PyTorch's own allocator: CUDA tensors freed during interpreter shutdown
// reach this library after static destructors would have run, and libcuda may be gone by then.
Process& process() {
  static Process* p = new Process;
  return *p;
}

void write_error(char* buffer, std::size_t size, const std::string& message) {
  if (buffer == nullptr || size == 0) return;
  std::snprintf(buffer, size, "%s", message.c_str());
}

const stalloc::RuntimeConfig& config_locked(Process& p) {
  if (!p.configured) {
    const char* env = std::getenv("STALLOC_CONF");
    p.config = stalloc::parse_runtime_config(env == nullptr ? "" : env);
    p.configured = true;
  }
  return p.config;
}

bool serving_locked(const Process& p) {
  return std::any_of(p.runtimes.begin(), p.runtimes.end(), [](const auto& r) { return r != nullptr; });
}

// The runtime of a device, created on first use; nullptr if it cannot be made (the reason goes to
// stderr once). PyTorch gets device pointers only: `auto` means the CUDA backend here, never the
// host emulation, which only an explicit backend:host (tests without a GPU) selects.
stalloc::Runtime* runtime_for(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  Process& p = process();
  const auto d = static_cast<std::size_t>(device);
  if (stalloc::Runtime* r = p.ready[d].load(std::memory_order_acquire)) return r;
  std::lock_guard<std::mutex> lock(p.mutex);
  auto& slot = p.runtimes[d];
  if (slot || p.failed[d]) return slot.get();
  try {
    stalloc::RuntimeConfig config = config_locked(p);
    if (config.backend == "auto") config.backend = "cuda";
    config.oom_wait_seconds = p.oom_wait_seconds.load(std::memory_order_relaxed);
    auto driver = stalloc::make_runtime_driver(config, device, p.host_lag);
    slot = std::make_unique<stalloc::Runtime>(config, *driver);
    p.drivers[d] = std::move(driver);
  } catch (const std::exception& e) {
    p.failed[d] = true;
    std::fprintf(stderr, "stalloc: cannot start the allocator for device %d: %s\n", device, e.what());
    return nullptr;
  }
  // Before the new runtime serves its first pointer, so that every pointer it serves is registered.
  if (p.first_device < 0) {
    p.first_device = device;
  } else {
    p.several.store(true, std::memory_order_release);
  }
  p.ready[d].store(slot.get(), std::memory_order_release);
  return slot.get();
}

stalloc::Runtime* existing_runtime(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return process().ready[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

template <typename F>
void for_each_runtime(F&& f) {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (auto& r : p.runtimes) {
    if (r) f(*r);
  }
}

stalloc::vmm::StreamHandle stream_handle(void* stream) { return reinterpret_cast<stalloc::vmm::StreamHandle>(stream); }

void register_owner(void* ptr, int device) {
  Process& p = process();
  if (!p.several.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(p.owners_mutex);
  p.owners[ptr] = device;
}

void forget_owner(void* ptr) {
  Process& p = process();
  if (!p.several.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(p.owners_mutex);
  p.owners.erase(ptr);
}

// The runtime that served `ptr`. Unregistered, it was served by the first runtime before a
// second one existed, or by none: then the one the caller names (`named`, -1: none) takes it,
// and counts it as an invalid free there.
stalloc::Runtime* owner_of(void* ptr, int named = -1) {
  Process& p = process();
  int device = -1;
  const bool several = p.several.load(std::memory_order_acquire);
  if (several) {
    std::lock_guard<std::mutex> lock(p.owners_mutex);
    auto it = p.owners.find(ptr);
    if (it != p.owners.end()) device = it->second;
  }
  if (device >= 0) return existing_runtime(device);
  int first = -1;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    first = p.first_device;
  }
  stalloc::Runtime* served_first = existing_runtime(first);
  if (!several || named < 0 || named == first) return served_first;
  if (served_first != nullptr && served_first->owns(ptr)) return served_first;
  stalloc::Runtime* claimed = existing_runtime(named);
  return claimed != nullptr ? claimed : served_first;
}

std::string oom_message(stalloc::Runtime& r, std::size_t size, int device) {
  const stalloc::RuntimeStats s = r.stats();
  std::ostringstream out;
  // PyTorch's own message starts the same way, so code that looks for it finds it.
  out << "CUDA out of memory. Tried to allocate " << stalloc::format_bytes(size) << ". GPU "
      << device << ": stalloc holds " << stalloc::format_bytes(s.reserved_bytes)
      << " reserved, of which " << stalloc::format_bytes(s.allocated_bytes)
      << " is allocated to live tensors, ";
  if (s.last_oom.capacity_bytes != 0) {
    out << "with a capacity of " << stalloc::format_bytes(s.last_oom.capacity_bytes);
  } else {
    std::size_t total = 0;
    out << "with no capacity set";
    if (r.driver().total_memory(&total) == stalloc::vmm::Status::Success) {
      out << " (the device has " << stalloc::format_bytes(total) << ")";
    }
  }
  out << ". Reason: " << (s.last_oom.reason.empty() ? "unknown" : s.last_oom.reason) << ". ";
  if (s.last_oom.beyond_capacity) {
    out << "Not retried: the live tensors and this request exceed the capacity.";
  } else {
    char waited[64];
    std::snprintf(waited, sizeof waited, "%.3f", s.last_oom.waited_seconds);
    out << "Tried again after emptying the cache and waiting for the GPU; retried "
        << s.last_oom.retries << " times over " << waited << " s waiting for frees of other threads.";
  }
  out << " See stalloc.memory_stats() and stalloc.stats(); STALLOC_CONF capacity sets the limit.";
  return out.str();
}

[[noreturn]] void raise_oom(const std::string& message) {
  if (OomThrower thrower = process().oom_thrower.load(std::memory_order_acquire)) {
    thrower(message.c_str());  // throws c10::OutOfMemoryError (libstalloc_torch_oom.so)
  }
  throw std::runtime_error(message);
}

void write_stat(stalloc::JsonWriter& j, const stalloc::RequestCounter& s) {
  j.begin_object()
      .field("current", s.current)
      .field("peak", s.peak)
      .field("allocated", s.allocated)
      .field("freed", s.freed)
      .end_object();
}

void write_pools(stalloc::JsonWriter& j,
                 const std::array<stalloc::RequestCounter, stalloc::kRequestPools>& stats) {
  j.begin_object();
  j.key("all");
  write_stat(j, stats[stalloc::kAllRequests]);
  j.key("small_pool");
  write_stat(j, stats[stalloc::kSmallRequests]);
  j.key("large_pool");
  write_stat(j, stats[stalloc::kLargeRequests]);
  j.end_object();
}

// The runtime's statistics in the shape of PyTorch's (the Python package maps them).
void write_request_stats(std::ostream& out, const stalloc::RuntimeStats& s) {
  stalloc::JsonWriter j(out);
  j.begin_object();
  j.key("allocation");
  write_pools(j, s.requests.count);
  j.key("requested_bytes");
  write_pools(j, s.requests.bytes);
  j.field("num_ooms", s.ooms).field("num_alloc_retries", s.alloc_retries);
  j.field("live_chunks", s.driver.live_chunks);
  j.field("chunk_creates", s.driver.creates).field("chunk_releases", s.driver.releases);
  j.end_object();
}

template <typename F>
int write_per_device(const char* path, char* error, std::size_t error_size, F&& write) {
  try {
    if (path == nullptr) throw stalloc::UsageError("no path given");
    int written = 0;
    Process& p = process();
    std::lock_guard<std::mutex> lock(p.mutex);
    for (std::size_t d = 0; d < p.runtimes.size(); ++d) {
      if (!p.runtimes[d]) continue;
      std::string target = path;
      if (d != 0) target += ".dev" + std::to_string(d);
      write(*p.runtimes[d], target);
      ++written;
    }
    if (written == 0) throw stalloc::UsageError("stalloc has served no allocation yet: nothing to write");
    return 0;
  } catch (const std::exception& e) {
    write_error(error, error_size, e.what());
    return 1;
  }
}

constexpr const char* kCaptureRefused =
    "stalloc: CUDA graph capture is not supported (torch.cuda.graph, CUDAGraph.capture_begin, "
    "torch.cuda.make_graphed_callables, torch.compile(mode=\"reduce-overhead\")): a captured "
    "graph keeps the addresses of the tensors it used, which stalloc gives to other tensors "
    "later, and stalloc's event queries and mappings are not allowed during a capture. Run "
    "graphs with PyTorch's own allocator (do not call stalloc.enable() in that process).";

// PyTorch 2.3+'s hook at the start of a CUDA graph capture (set_begin_allocate_to_pool): refuses
// the capture before it begins, with the reason. PyTorch calls it before cudaStreamBeginCapture.
void begin_allocate_to_pool(int /*device*/,
                            std::pair<unsigned long long, unsigned long long> /*pool*/,
                            std::function<bool(CUstream_st*)> /*filter*/) {
  throw std::runtime_error(kCaptureRefused);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int stalloc_configure(const char* conf, char* error,
                                                             std::size_t error_size) {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  try {
    if (serving_locked(p)) {
      throw stalloc::UsageError("stalloc is already serving allocations: configure it first");
    }
    p.config = stalloc::parse_runtime_config(conf == nullptr ? "" : conf);
    p.configured = true;
    return 0;
  } catch (const std::exception& e) {
    write_error(error, error_size, e.what());
    return 1;
  }
}

// The host backend's lagging events (vmm/host_driver.h, HostLag): each recorded event completes
// only after `queries` queries (each draws from [0, queries] when seed is not 0). For tests of
// the paths where GPU work is still pending; the CUDA backend ignores it. Before the first
// allocation only.
__attribute__((visibility("default"))) int stalloc_set_host_lag(unsigned queries,
                                                                unsigned long long seed,
                                                                char* error,
                                                                std::size_t error_size) {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (serving_locked(p)) {
    write_error(error, error_size, "stalloc is already serving allocations: set the lag first");
    return 1;
  }
  p.host_lag.queries = queries;
  p.host_lag.seed = seed;
  return 0;
}

__attribute__((visibility("default"))) void* stalloc_malloc(std::size_t size, int device, void* stream) {
  // As PyTorch's own allocator: an empty tensor gets no memory and a null pointer (PyTorch never
  // frees or dereferences it). Nothing is recorded, so empty tensors do not enter the plans.
  if (size == 0) return nullptr;
  if (device < 0 || device >= kMaxDevices) {
    throw std::runtime_error("stalloc: cannot allocate " + std::to_string(size) +
                             " bytes on device " + std::to_string(device) +
                             ": no such device (stalloc serves devices 0 to " +
                             std::to_string(kMaxDevices - 1) + ")");
  }
  stalloc::Runtime* r = runtime_for(device);
  if (r == nullptr) {
    throw std::runtime_error("stalloc: cannot allocate " + std::to_string(size) +
                             " bytes on device " + std::to_string(device) +
                             ": the allocator did not start (the reason was printed above)");
  }
  void* p = r->malloc(size, device, stream_handle(stream));
  if (p == nullptr) raise_oom(oom_message(*r, size, device));
  register_owner(p, device);
  return p;
}

__attribute__((visibility("default"))) void stalloc_free(void* ptr, std::size_t size, int device,
                                                         void* stream) {
  if (ptr == nullptr) return;
  // The runtime that served the pointer, whatever device the caller names: one told another
  // device's pointer would count an invalid free and leak the block.
  stalloc::Runtime* r = owner_of(ptr, device);
  if (r == nullptr) return;
  forget_owner(ptr);
  r->free(ptr, size, device, stream_handle(stream));
}

// Only the runtime that served the pointer sees the stream: another device's runtime would take
// it for one of its own streams.
__attribute__((visibility("default"))) void stalloc_record_stream(void* ptr, void* stream) {
  if (ptr == nullptr) return;  // an empty tensor
  if (stalloc::Runtime* r = owner_of(ptr)) r->record_stream(ptr, stream_handle(stream));
}

__attribute__((visibility("default"))) void stalloc_reset() {
  for_each_runtime([](stalloc::Runtime& r) { r.empty_cache(); });
}

__attribute__((visibility("default"))) void stalloc_set_memory_fraction(double fraction, int device) {
  stalloc::Runtime* r = runtime_for(device);
  if (r == nullptr) return;
  // Nothing may unwind into PyTorch through the C ABI: a fraction that cannot be applied leaves
  // the cap as it was and says why.
  try {
    r->set_memory_fraction(fraction);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stalloc: memory fraction %g not applied on device %d: %s\n", fraction,
                 device, e.what());
  }
}

__attribute__((visibility("default"))) void stalloc_step() {
  for_each_runtime([](stalloc::Runtime& r) { r.step(); });
}

// Waits for every device's background planning and installs what it made: for deterministic
// tests, and before a process that made the runtimes ends its threads.
__attribute__((visibility("default"))) void stalloc_wait_for_planning() {
  for_each_runtime([](stalloc::Runtime& r) { r.wait_for_planning(); });
}

// torch.cuda.reset_peak_memory_stats: peaks restart from the current values (device < 0: all).
__attribute__((visibility("default"))) void stalloc_reset_peak_stats(int device) {
  for (int d = 0; d < kMaxDevices; ++d) {
    if (device >= 0 && d != device) continue;
    if (stalloc::Runtime* r = existing_runtime(d)) r->reset_peak_stats();
  }
}

// torch.cuda.reset_accumulated_memory_stats: what was allocated and freed in all, the retries and
// the out-of-memory errors start again from 0 (device < 0: all).
__attribute__((visibility("default"))) void stalloc_reset_accumulated_stats(int device) {
  for (int d = 0; d < kMaxDevices; ++d) {
    if (device >= 0 && d != device) continue;
    if (stalloc::Runtime* r = existing_runtime(d)) r->reset_accumulated_stats();
  }
}

// A function that throws PyTorch's out-of-memory error (c10::OutOfMemoryError, which Python sees
// as torch.cuda.OutOfMemoryError) with the message; libstalloc_torch_oom.so has one. Without it
// an allocation that fails raises std::runtime_error (Python: RuntimeError) with the same message.
__attribute__((visibility("default"))) void stalloc_set_oom_thrower(OomThrower thrower) {
  process().oom_thrower.store(thrower, std::memory_order_release);
}

// How long a failed allocation waits for frees of other threads, in seconds, before it raises
// (0: not at all; RuntimeConfig::oom_wait_seconds).
__attribute__((visibility("default"))) void stalloc_set_oom_wait(double seconds) {
  process().oom_wait_seconds.store(seconds > 0 ? seconds : 0.0, std::memory_order_relaxed);
  for_each_runtime([seconds](stalloc::Runtime& r) { r.set_oom_wait(seconds); });
}

// Writes the statistics of every device as JSON into buffer when it is large enough; returns the
// length the JSON needs (without the terminating zero):
//   {"devices": {"0": {runtime statistics}}, "pytorch": {"0": {PyTorch's request counters}}}
__attribute__((visibility("default"))) std::size_t stalloc_stats_json(char* buffer, std::size_t size) {
  std::ostringstream out;
  out << "{\"devices\":{";
  std::array<stalloc::RuntimeStats, kMaxDevices> all{};
  std::array<bool, kMaxDevices> present{};
  {
    Process& p = process();
    std::lock_guard<std::mutex> lock(p.mutex);
    bool first = true;
    for (std::size_t d = 0; d < p.runtimes.size(); ++d) {
      if (!p.runtimes[d]) continue;
      out << (first ? "" : ",") << '"' << d << "\":";
      first = false;
      const stalloc::RuntimeStats stats = p.runtimes[d]->stats();
      stalloc::write_stats_json(stats, out);
      all[d] = stats;
      present[d] = true;
    }
  }
  out << "},\"pytorch\":{";
  bool first = true;
  for (std::size_t d = 0; d < present.size(); ++d) {
    if (!present[d]) continue;
    out << (first ? "" : ",") << '"' << d << "\":";
    first = false;
    write_request_stats(out, all[d]);
  }
  out << "}}";
  std::string json = out.str();
  if (buffer != nullptr && size > json.size()) std::memcpy(buffer, json.c_str(), json.size() + 1);
  return json.size();
}

__attribute__((visibility("default"))) int stalloc_dump_snapshot(const char* path, char* error,
                                                                 std::size_t error_size) {
  return write_per_device(path, error, error_size,
                          [](stalloc::Runtime& r, const std::string& t) { r.save_snapshot(t); });
}

__attribute__((visibility("default"))) int stalloc_save_trace(const char* path, char* error,
                                                              std::size_t error_size) {
  return write_per_device(path, error, error_size,
                          [](stalloc::Runtime& r, const std::string& t) { r.save_trace(t); });
}

// PyTorch 2.0-2.2's hook at the start of a CUDA graph capture (set_begin_allocate_stream_to_pool):
// refuses the capture before it begins, with the reason.
__attribute__((visibility("default"))) void stalloc_begin_allocate_stream_to_pool(
    int /*device*/, CUstream_st* /*stream*/, std::pair<unsigned long long, unsigned long long> /*pool*/) {
  throw std::runtime_error(kCaptureRefused);
}

}  // extern "C"

// PyTorch 2.3+'s hook (set_begin_allocate_to_pool) has a C++ type,
// void(int, MempoolId_t, std::function<bool(cudaStream_t)>): the Python package asks for its
// address.
extern "C" __attribute__((visibility("default"))) void* stalloc_begin_allocate_to_pool_address() {
  return reinterpret_cast<void*>(&begin_allocate_to_pool);
}
