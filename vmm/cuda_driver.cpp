// CUDA driver API backend. Nothing here links against libcuda: cuda.h supplies types and
// constants only, dlopen("libcuda.so.1") and cuGetProcAddress supply the entry points, so a
// binary built with cuda.h still starts on a machine without a GPU.
//
// Function pointer types are taken with decltype from cuda.h's own declarations, which follow the
// header's versioned names (cuEventDestroy is cuEventDestroy_v2, ...). cuGetProcAddress is asked
// for the version the header was written for, capped at the installed driver's version, so the
// pointer it returns has the signature the header declares.
//
// Driver calls need the device's primary context current on the calling thread. PyTorch calls
// the allocator from several threads, and the thread's current context is PyTorch's (set by
// cudaSetDevice, perhaps for another device): each call makes this driver's context current for
// its duration only and gives the caller's back (ContextScope), so that neither a stale guess
// nor a switched context leaks into PyTorch's later work.
#include "vmm/cuda_driver.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace stalloc::vmm {
namespace {

Status to_status(CUresult r) {
  switch (static_cast<int>(r)) {
    case 0: return Status::Success;
    case 1: return Status::InvalidValue;
    case 2: return Status::OutOfMemory;
    case 3: return Status::NotInitialized;
    case 4: return Status::Deinitialized;
    case 100: return Status::NoDevice;
    case 101: return Status::InvalidDevice;
    case 201: return Status::InvalidContext;
    case 400: return Status::InvalidHandle;
    case 500: return Status::NotFound;
    case 600: return Status::NotReady;
    case 700: return Status::IllegalAddress;
    case 709: return Status::ContextDestroyed;
    case 800: return Status::NotPermitted;
    case 801: return Status::NotSupported;
    default:
      // 900-907: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED .. CUDA_ERROR_CAPTURED_EVENT and kin.
      return static_cast<int>(r) >= 900 && static_cast<int>(r) <= 907 ? Status::CaptureUnsupported
                                                                        : Status::Unknown;
  }
}

std::string unavailable_message(const std::string& why) {
  return "CUDA driver not available (" + why + "): use the host backend (--backend host)";
}

// The driver API entry points this backend uses, resolved once per driver.
struct CudaApi {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceTotalMem) device_total_mem = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuMemcpyHtoD) memcpy_htod = nullptr;
  decltype(&::cuMemcpyDtoH) memcpy_dtoh = nullptr;
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventQuery) event_query = nullptr;
  decltype(&::cuEventDestroy) event_destroy = nullptr;
  decltype(&::cuStreamWaitEvent) stream_wait_event = nullptr;
  decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&::cuStreamIsCapturing) stream_is_capturing = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamDestroy) stream_destroy = nullptr;
  decltype(&::cuDeviceGetCount) device_get_count = nullptr;
  decltype(&::cuDeviceCanAccessPeer) device_can_access_peer = nullptr;
};

class Library {
 public:
  Library() : handle_(dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) {
      const char* err = dlerror();
      throw DriverUnavailable(unavailable_message(err != nullptr ? err : "dlopen libcuda.so.1"));
    }
  }
  ~Library() { dlclose(handle_); }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  void* symbol(const char* name) const { return dlsym(handle_, name); }

 private:
  void* handle_;
};

template <typename Fn>
void resolve(decltype(&::cuGetProcAddress) get_proc, int version, const char* name, Fn* out) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = get_proc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found);
  if (r != CUDA_SUCCESS || fn == nullptr || found != CU_GET_PROC_ADDRESS_SUCCESS) {
    throw DriverUnavailable(unavailable_message(std::string("libcuda has no ") + name));
  }
  *out = reinterpret_cast<Fn>(fn);
}

CudaApi load_api(const Library& lib) {
  auto driver_get_version = reinterpret_cast<decltype(&::cuDriverGetVersion)>(
      lib.symbol("cuDriverGetVersion"));
  auto get_proc = reinterpret_cast<decltype(&::cuGetProcAddress)>(
      lib.symbol("cuGetProcAddress_v2"));
  if (driver_get_version == nullptr || get_proc == nullptr) {
    throw DriverUnavailable(unavailable_message("libcuda lacks cuGetProcAddress_v2 (CUDA < 12)"));
  }
  int driver_version = 0;
  if (driver_get_version(&driver_version) != CUDA_SUCCESS) {
    throw DriverUnavailable(unavailable_message("cuDriverGetVersion failed"));
  }
  const int version = std::min(driver_version, CUDA_VERSION);
  CudaApi api;
  resolve(get_proc, version, "cuInit", &api.init);
  resolve(get_proc, version, "cuGetErrorName", &api.get_error_name);
  resolve(get_proc, version, "cuDeviceGet", &api.device_get);
  resolve(get_proc, version, "cuDeviceTotalMem", &api.device_total_mem);
  resolve(get_proc, version, "cuDeviceGetAttribute", &api.device_get_attribute);
  resolve(get_proc, version, "cuDevicePrimaryCtxRetain", &api.primary_ctx_retain);
  resolve(get_proc, version, "cuDevicePrimaryCtxRelease", &api.primary_ctx_release);
  resolve(get_proc, version, "cuCtxSetCurrent", &api.ctx_set_current);
  resolve(get_proc, version, "cuCtxGetCurrent", &api.ctx_get_current);
  resolve(get_proc, version, "cuMemGetAllocationGranularity", &api.mem_get_allocation_granularity);
  resolve(get_proc, version, "cuMemCreate", &api.mem_create);
  resolve(get_proc, version, "cuMemRelease", &api.mem_release);
  resolve(get_proc, version, "cuMemAddressReserve", &api.mem_address_reserve);
  resolve(get_proc, version, "cuMemAddressFree", &api.mem_address_free);
  resolve(get_proc, version, "cuMemMap", &api.mem_map);
  resolve(get_proc, version, "cuMemUnmap", &api.mem_unmap);
  resolve(get_proc, version, "cuMemSetAccess", &api.mem_set_access);
  resolve(get_proc, version, "cuMemcpyHtoD", &api.memcpy_htod);
  resolve(get_proc, version, "cuMemcpyDtoH", &api.memcpy_dtoh);
  resolve(get_proc, version, "cuEventCreate", &api.event_create);
  resolve(get_proc, version, "cuEventRecord", &api.event_record);
  resolve(get_proc, version, "cuEventQuery", &api.event_query);
  resolve(get_proc, version, "cuEventDestroy", &api.event_destroy);
  resolve(get_proc, version, "cuStreamWaitEvent", &api.stream_wait_event);
  resolve(get_proc, version, "cuCtxSynchronize", &api.ctx_synchronize);
  resolve(get_proc, version, "cuStreamIsCapturing", &api.stream_is_capturing);
  resolve(get_proc, version, "cuStreamCreate", &api.stream_create);
  resolve(get_proc, version, "cuStreamDestroy", &api.stream_destroy);
  resolve(get_proc, version, "cuDeviceGetCount", &api.device_get_count);
  resolve(get_proc, version, "cuDeviceCanAccessPeer", &api.device_can_access_peer);
  return api;
}

CUevent as_event(EventHandle e) { return reinterpret_cast<CUevent>(e); }
CUstream as_stream(StreamHandle s) { return reinterpret_cast<CUstream>(s); }

class CudaDriver final : public Driver {
 public:
  explicit CudaDriver(int device) : api_(load_api(lib_)), device_(device) {
    check("cuInit", api_.init(0));
    check("cuDeviceGet", api_.device_get(&cu_device_, device));
    check("cuDevicePrimaryCtxRetain", api_.primary_ctx_retain(&context_, cu_device_));
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = cu_device_;
    // As PyTorch's expandable segments: chunks GPUDirect RDMA can reach where the device allows
    // it with VMM memory, so that NCCL's user-buffer registration and RDMA libraries can
    // register stalloc's memory.
    int rdma = 0;
    if (api_.device_get_attribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
                                  cu_device_) == CUDA_SUCCESS &&
        rdma != 0) {
      prop_.allocFlags.gpuDirectRDMACapable = 1;
    }
    const ContextScope scope(api_, context_);
    const CUresult r = api_.mem_get_allocation_granularity(&granularity_, &prop_,
                                                           CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) {
      api_.primary_ctx_release(cu_device_);
      check("cuMemGetAllocationGranularity", r);
    }
  }

  ~CudaDriver() override { api_.primary_ctx_release(cu_device_); }

  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  std::string_view name() const override { return "cuda"; }
  int device() const override { return device_; }
  bool host_accessible() const override { return false; }

  Status granularity(std::size_t* out) override {
    if (out == nullptr) return Status::InvalidValue;
    *out = granularity_;
    return Status::Success;
  }

  Status total_memory(std::size_t* out) override {
    if (out == nullptr) return Status::InvalidValue;
    return to_status(api_.device_total_mem(out, cu_device_));
  }

  Status create(ChunkHandle* out, std::size_t size) override {
    if (out == nullptr) return Status::InvalidValue;
    const ContextScope scope(api_, context_);
    CUmemGenericAllocationHandle handle = 0;
    const Status s = to_status(api_.mem_create(&handle, size, &prop_, 0));
    if (s != Status::Success) return s;
    std::lock_guard lock(mu_);
    chunk_sizes_.emplace(handle, size);
    ++counters_.creates;
    ++counters_.live_chunks;
    counters_.chunk_bytes += size;
    counters_.peak_chunk_bytes = std::max(counters_.peak_chunk_bytes, counters_.chunk_bytes);
    *out = handle;
    return Status::Success;
  }

  // CUDA frees the memory when the last mapping goes; the counters follow the handle.
  Status release(ChunkHandle chunk) override {
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.mem_release(chunk));
    if (s != Status::Success) return s;
    std::lock_guard lock(mu_);
    auto it = chunk_sizes_.find(chunk);
    if (it != chunk_sizes_.end()) {
      counters_.chunk_bytes -= it->second;
      chunk_sizes_.erase(it);
    }
    ++counters_.releases;
    --counters_.live_chunks;
    return Status::Success;
  }

  Status reserve(DevicePtr* out, std::size_t size, std::size_t alignment) override {
    // The Driver contract (docs/vmm.md), which the host backend enforces too: CUDA itself
    // accepts any multiple of the host page size here.
    const bool aligned_alignment =
        alignment == 0 || ((alignment & (alignment - 1)) == 0 && alignment % granularity_ == 0);
    if (out == nullptr || size == 0 || size % granularity_ != 0 || !aligned_alignment) {
      return Status::InvalidValue;
    }
    const ContextScope scope(api_, context_);
    CUdeviceptr ptr = 0;
    const Status s = to_status(api_.mem_address_reserve(&ptr, size, alignment, 0, 0));
    if (s != Status::Success) return s;
    std::lock_guard lock(mu_);
    reservations_.emplace(static_cast<DevicePtr>(ptr), size);
    ++counters_.reserves;
    ++counters_.live_reservations;
    *out = static_cast<DevicePtr>(ptr);
    return Status::Success;
  }

  Status free_reservation(DevicePtr ptr, std::size_t size) override {
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.mem_address_free(ptr, size));
    if (s != Status::Success) return s;
    std::lock_guard lock(mu_);
    reservations_.erase(ptr);
    ++counters_.frees;
    --counters_.live_reservations;
    return Status::Success;
  }

  Status map(DevicePtr ptr, std::size_t size, std::size_t offset, ChunkHandle chunk) override {
    // The Driver contract: inside a range this driver reserved. CUDA itself mapped past the end
    // of a reservation of two granules on an H200 (driver 580), into what it keeps beyond it.
    {
      std::lock_guard lock(mu_);
      auto it = reservations_.upper_bound(ptr);
      if (it == reservations_.begin()) return Status::InvalidValue;
      --it;
      if (size > it->second || ptr - it->first > it->second - size) return Status::InvalidValue;
    }
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.mem_map(ptr, size, offset, chunk, 0));
    if (s != Status::Success) return s;
    std::lock_guard lock(mu_);
    ++counters_.maps;
    ++counters_.live_mappings;
    counters_.peak_live_mappings = std::max(counters_.peak_live_mappings, counters_.live_mappings);
    return Status::Success;
  }

  Status unmap(DevicePtr ptr, std::size_t size) override {
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.mem_unmap(ptr, size));
    if (s != Status::Success) return s;
    std::lock_guard lock(mu_);
    ++counters_.unmaps;
    --counters_.live_mappings;
    return Status::Success;
  }

  Status set_access(DevicePtr ptr, std::size_t size, Access access) override {
    const CUmemAccess_flags flags = access == Access::ReadWrite ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                    : access == Access::Read    ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                                                : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    std::vector<CUmemAccessDesc> descs;
    {
      std::lock_guard lock(mu_);
      descs.resize(1 + peers_.size());
      for (std::size_t i = 0; i < descs.size(); ++i) {
        descs[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        descs[i].location.id = i == 0 ? cu_device_ : peers_[i - 1];
        descs[i].flags = flags;
      }
    }
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.mem_set_access(ptr, size, descs.data(), descs.size()));
    if (s != Status::Success) return s;
    std::lock_guard lock(mu_);
    ++counters_.set_accesses;
    counters_.set_access_bytes += size * descs.size();
    return Status::Success;
  }

  // Devices whose kernels can reach this device's memory.
  Status accessible_peers(std::vector<int>* out) override {
    if (out == nullptr) return Status::InvalidValue;
    out->clear();
    int count = 0;
    Status s = to_status(api_.device_get_count(&count));
    if (s != Status::Success) return s;
    for (int d = 0; d < count; ++d) {
      if (d == device_) continue;
      CUdevice peer = 0;
      int can = 0;
      s = to_status(api_.device_get(&peer, d));
      if (s == Status::Success) s = to_status(api_.device_can_access_peer(&can, peer, cu_device_));
      if (s != Status::Success) return s;
      if (can != 0) out->push_back(d);
    }
    return Status::Success;
  }

  Status set_peers(const std::vector<int>& devices) override {
    std::vector<int> possible;
    const Status s = accessible_peers(&possible);
    if (s != Status::Success) return s;
    std::vector<CUdevice> peers;
    for (int d : devices) {
      if (std::find(possible.begin(), possible.end(), d) == possible.end()) {
        return Status::InvalidDevice;
      }
      CUdevice peer = 0;
      const Status got = to_status(api_.device_get(&peer, d));
      if (got != Status::Success) return got;
      peers.push_back(peer);
    }
    std::lock_guard lock(mu_);
    peers_ = std::move(peers);
    return Status::Success;
  }

  Status event_create(EventHandle* out) override {
    if (out == nullptr) return Status::InvalidValue;
    const ContextScope scope(api_, context_);
    CUevent event = nullptr;
    const Status s = to_status(api_.event_create(&event, CU_EVENT_DISABLE_TIMING));
    if (s != Status::Success) return s;
    std::lock_guard lock(mu_);
    ++counters_.event_creates;
    ++counters_.live_events;
    *out = reinterpret_cast<EventHandle>(event);
    return Status::Success;
  }

  Status event_destroy(EventHandle event) override {
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.event_destroy(as_event(event)));
    if (s != Status::Success) return s;
    std::lock_guard lock(mu_);
    ++counters_.event_destroys;
    --counters_.live_events;
    return Status::Success;
  }

  Status event_record(EventHandle event, StreamHandle stream) override {
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.event_record(as_event(event), as_stream(stream)));
    if (s == Status::Success) count(&DriverCounters::event_records);
    return s;
  }

  Status event_query(EventHandle event) override {
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.event_query(as_event(event)));
    if (s == Status::Success || s == Status::NotReady) count(&DriverCounters::event_queries);
    return s;
  }

  Status stream_wait_event(StreamHandle stream, EventHandle event) override {
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.stream_wait_event(as_stream(stream), as_event(event), 0));
    if (s == Status::Success) count(&DriverCounters::stream_waits);
    return s;
  }

  Status synchronize() override {
    const ContextScope scope(api_, context_);
    const Status s = to_status(api_.ctx_synchronize());
    if (s == Status::Success) count(&DriverCounters::synchronizes);
    return s;
  }

  Status stream_is_capturing(StreamHandle stream, bool* capturing) override {
    if (capturing == nullptr) return Status::InvalidValue;
    const ContextScope scope(api_, context_);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const Status s = to_status(api_.stream_is_capturing(as_stream(stream), &status));
    if (s != Status::Success) return s;
    count(&DriverCounters::capture_queries);
    *capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
    return Status::Success;
  }

  Status stream_create(StreamHandle* out) override {
    if (out == nullptr) return Status::InvalidValue;
    const ContextScope scope(api_, context_);
    CUstream stream = nullptr;
    const Status s = to_status(api_.stream_create(&stream, CU_STREAM_NON_BLOCKING));
    if (s == Status::Success) *out = reinterpret_cast<StreamHandle>(stream);
    return s;
  }

  Status stream_destroy(StreamHandle stream) override {
    const ContextScope scope(api_, context_);
    return to_status(api_.stream_destroy(as_stream(stream)));
  }

  Status write_bytes(DevicePtr dst, const void* src, std::size_t size) override {
    const ContextScope scope(api_, context_);
    return to_status(api_.memcpy_htod(dst, src, size));
  }

  Status read_bytes(void* dst, DevicePtr src, std::size_t size) override {
    const ContextScope scope(api_, context_);
    return to_status(api_.memcpy_dtoh(dst, src, size));
  }

  DriverCounters counters() const override {
    std::lock_guard lock(mu_);
    return counters_;
  }

 private:
  void check(const char* call, CUresult r) const {
    if (r == CUDA_SUCCESS) return;
    const char* name = nullptr;
    if (api_.get_error_name(r, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown error";
    throw DriverUnavailable(unavailable_message(std::string(call) + " on device " +
                                                std::to_string(device_) + ": " + name));
  }

  class ContextScope {
   public:
    ContextScope(const CudaApi& api, CUcontext context) : api_(api) {
      if (api_.ctx_get_current(&previous_) != CUDA_SUCCESS) previous_ = nullptr;
      switched_ = previous_ != context && api_.ctx_set_current(context) == CUDA_SUCCESS;
    }
    ~ContextScope() {
      if (switched_) api_.ctx_set_current(previous_);
    }
    ContextScope(const ContextScope&) = delete;
    ContextScope& operator=(const ContextScope&) = delete;

   private:
    const CudaApi& api_;
    CUcontext previous_ = nullptr;
    bool switched_ = false;
  };

  void count(std::uint64_t DriverCounters::*field) {
    std::lock_guard lock(mu_);
    ++(counters_.*field);
  }

  Library lib_;
  CudaApi api_;
  int device_;
  CUdevice cu_device_ = 0;
  CUcontext context_ = nullptr;
  CUmemAllocationProp prop_{};
  std::size_t granularity_ = 0;

  mutable std::mutex mu_;
  std::vector<CUdevice> peers_;  // given access by set_access beside the owner
  std::unordered_map<ChunkHandle, std::size_t> chunk_sizes_;
  std::map<DevicePtr, std::size_t> reservations_;  // base -> size, of this driver's ranges
  DriverCounters counters_;
};

}  // namespace

std::unique_ptr<Driver> make_cuda_driver(int device) {
  return std::make_unique<CudaDriver>(device);
}

}  // namespace stalloc::vmm
