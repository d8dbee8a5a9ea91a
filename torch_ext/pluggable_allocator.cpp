// libstalloc_torch.so: the C ABI that torch.cuda.memory.CUDAPluggableAllocator loads, plus the
// calls the Python package (torch_ext/python/stalloc) makes through ctypes.
//
// PyTorch gives the allocator no context pointer, so the runtimes live in process-wide state:
// one Runtime per device, created on the first request for that device with the configuration
// stalloc_configure stored. Functions with an error buffer return 0 on success and write a
// message otherwise. Only stalloc_malloc throws: PyTorch does not check the pointer an allocator
// returns (a nullptr would fail later as an illegal address in some kernel), so a failed
// allocation raises, as PyTorch's own allocator does, and Python sees a RuntimeError saying why.
// ctypes callers must not make it fail.
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <sstream>
#include <string>

#include "src/allocator.h"
#include "src/runtime_config.h"
#include "src/runtime_stats.h"

namespace {

constexpr int kMaxDevices = 64;

struct Process {
  std::mutex mutex;
  stalloc::RuntimeConfig config;
  bool configured = false;
  std::array<std::unique_ptr<stalloc::Runtime>, kMaxDevices> runtimes;
  std::array<bool, kMaxDevices> failed{};
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

// The runtime of a device, created on first use; nullptr if it cannot be made (the reason goes to
// stderr once). PyTorch gets device pointers only: `auto` means the CUDA backend here, never the
// host emulation, which only an explicit backend:host (tests without a GPU) selects.
stalloc::Runtime* runtime_for(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto& slot = p.runtimes[static_cast<std::size_t>(device)];
  if (slot || p.failed[static_cast<std::size_t>(device)]) return slot.get();
  try {
    stalloc::RuntimeConfig config = config_locked(p);
    if (config.backend == "auto") config.backend = "cuda";
    slot = std::make_unique<stalloc::Runtime>(config, device);
  } catch (const std::exception& e) {
    p.failed[static_cast<std::size_t>(device)] = true;
    std::fprintf(stderr, "stalloc: cannot start the allocator for device %d: %s\n", device, e.what());
  }
  return slot.get();
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
}  // namespace

extern "C" {

__attribute__((visibility("default"))) int stalloc_configure(const char* conf, char* error,
                                                             std::size_t error_size) {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  try {
    for (const auto& r : p.runtimes) {
      if (r) throw stalloc::UsageError("stalloc is already serving allocations: configure it first");
    }
    p.config = stalloc::parse_runtime_config(conf == nullptr ? "" : conf);
    p.configured = true;
    return 0;
  } catch (const std::exception& e) {
    write_error(error, error_size, e.what());
    return 1;
  }
}

__attribute__((visibility("default"))) void* stalloc_malloc(std::size_t size, int device, void* stream) {
  stalloc::Runtime* r = runtime_for(device);
  void* p = r == nullptr ? nullptr : r->malloc(size, device, stream_handle(stream));
  if (p == nullptr && size > 0) {
    throw std::runtime_error(
        "stalloc: cannot allocate " + std::to_string(size) + " bytes on device " +
        std::to_string(device) + ": " +
        (r == nullptr ? std::string("the allocator did not start (the reason was printed above)")
                      : "out of memory: " + r->stats().last_oom.reason));
  }
  return p;
}

__attribute__((visibility("default"))) void stalloc_free(void* ptr, std::size_t size, int device,
                                                         void* stream) {
  if (ptr == nullptr) return;
  stalloc::Runtime* r = runtime_for(device);
  if (r != nullptr) r->free(ptr, size, device, stream_handle(stream));
}

__attribute__((visibility("default"))) void stalloc_record_stream(void* ptr, void* stream) {
  for_each_runtime([&](stalloc::Runtime& r) { r.record_stream(ptr, stream_handle(stream)); });
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

// Writes the statistics of every device as JSON {"devices": {"0": {...}}} into buffer when it is
// large enough; returns the length the JSON needs (without the terminating zero).
__attribute__((visibility("default"))) std::size_t stalloc_stats_json(char* buffer, std::size_t size) {
  std::ostringstream out;
  out << "{\"devices\":{";
  {
    Process& p = process();
    std::lock_guard<std::mutex> lock(p.mutex);
    bool first = true;
    for (std::size_t d = 0; d < p.runtimes.size(); ++d) {
      if (!p.runtimes[d]) continue;
      out << (first ? "" : ",") << '"' << d << "\":";
      first = false;
      stalloc::write_stats_json(p.runtimes[d]->stats(), out);
    }
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

}  // extern "C"
