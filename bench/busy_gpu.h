// Kernels that keep a GPU busy while a benchmark times VMM calls: CUDA serialises some driver
// calls behind work in flight, so cuMemUnmap and cuMemSetAccess may cost more during a training
// step than on an idle device, which is all the plain benchmarks see. A memset of a buffer of its
// own, enqueued many times on a stream of its own, is the load; nothing here touches the
// allocator's memory.
//
// Benchmark-only, so it talks to libcuda itself (dlopen, C types; no cuda.h) instead of widening
// the Driver interface for a test load.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <memory>
#include <string>

namespace stalloc::bench {

class BusyGpu {
 public:
  // The primary context of `device`, a stream and a buffer of `bytes`; nullptr and *why when any
  // of them cannot be had (no libcuda, no device).
  static std::unique_ptr<BusyGpu> open(int device, std::size_t bytes, std::string* why) {
    auto gpu = std::unique_ptr<BusyGpu>(new BusyGpu());
    if (!gpu->start(device, bytes, why)) return nullptr;
    return gpu;
  }

  ~BusyGpu() {
    if (stream_ != nullptr) {
      stream_synchronize_(stream_);
      stream_destroy_(stream_);
    }
    if (buffer_ != 0) mem_free_(buffer_);
    if (retained_) ctx_release_(device_);
    if (lib_ != nullptr) dlclose(lib_);
  }
  BusyGpu(const BusyGpu&) = delete;
  BusyGpu& operator=(const BusyGpu&) = delete;

  // Enqueues `passes` memsets of the whole buffer; false if CUDA refused one.
  bool load(int passes) {
    for (int i = 0; i < passes; ++i) {
      if (memset_d32_async_(buffer_, 0x5a5a5a5au, bytes_ / 4, stream_) != 0) return false;
    }
    return true;
  }
  // The load enqueued so far is still running (CUDA_ERROR_NOT_READY).
  bool busy() { return stream_query_(stream_) == kNotReady; }
  bool wait() { return stream_synchronize_(stream_) == 0; }

 private:
  static constexpr int kNotReady = 600;
  using Ptr = unsigned long long;  // CUdeviceptr
  BusyGpu() = default;

  template <typename Fn>
  bool resolve(const char* name, Fn* out, std::string* why) {
    void* symbol = dlsym(lib_, name);
    if (symbol == nullptr) {
      *why = std::string("libcuda has no ") + name;
      return false;
    }
    *out = reinterpret_cast<Fn>(symbol);
    return true;
  }

  bool start(int device, std::size_t bytes, std::string* why) {
    lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      *why = "no libcuda.so.1: the load needs a GPU";
      return false;
    }
    int (*init)(unsigned) = nullptr;
    int (*device_get)(int*, int) = nullptr;
    int (*ctx_retain)(void**, int) = nullptr;
    int (*ctx_set_current)(void*) = nullptr;
    int (*mem_alloc)(Ptr*, std::size_t) = nullptr;
    int (*stream_create)(void**, unsigned) = nullptr;
    if (!resolve("cuInit", &init, why) || !resolve("cuDeviceGet", &device_get, why) ||
        !resolve("cuDevicePrimaryCtxRetain", &ctx_retain, why) ||
        !resolve("cuDevicePrimaryCtxRelease_v2", &ctx_release_, why) ||
        !resolve("cuCtxSetCurrent", &ctx_set_current, why) ||
        !resolve("cuMemAlloc_v2", &mem_alloc, why) || !resolve("cuMemFree_v2", &mem_free_, why) ||
        !resolve("cuMemsetD32Async", &memset_d32_async_, why) ||
        !resolve("cuStreamCreate", &stream_create, why) ||
        !resolve("cuStreamDestroy_v2", &stream_destroy_, why) ||
        !resolve("cuStreamQuery", &stream_query_, why) ||
        !resolve("cuStreamSynchronize", &stream_synchronize_, why)) {
      return false;
    }
    void* context = nullptr;
    if (init(0) != 0 || device_get(&device_, device) != 0 || ctx_retain(&context, device_) != 0) {
      *why = "no CUDA device " + std::to_string(device);
      return false;
    }
    retained_ = true;
    bytes_ = bytes / 4 * 4;
    constexpr unsigned kNonBlocking = 1;  // CU_STREAM_NON_BLOCKING
    if (ctx_set_current(context) != 0 || mem_alloc(&buffer_, bytes_) != 0 ||
        stream_create(&stream_, kNonBlocking) != 0) {
      *why = "the load's context, buffer or stream could not be had";
      return false;
    }
    return true;
  }

  void* lib_ = nullptr;
  int device_ = 0;
  bool retained_ = false;
  std::size_t bytes_ = 0;
  Ptr buffer_ = 0;
  void* stream_ = nullptr;
  int (*ctx_release_)(int) = nullptr;
  int (*mem_free_)(Ptr) = nullptr;
  int (*memset_d32_async_)(Ptr, unsigned, std::size_t, void*) = nullptr;
  int (*stream_destroy_)(void*) = nullptr;
  int (*stream_query_)(void*) = nullptr;
  int (*stream_synchronize_)(void*) = nullptr;
};

}  // namespace stalloc::bench
