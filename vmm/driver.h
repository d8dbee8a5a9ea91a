// The one interface to GPU virtual memory management. Everything above vmm/ talks to a Driver,
// never to libcuda: the CUDA backend forwards to the driver API (loaded at run time), the host
// backend emulates it with memfd/mmap and enforces the same rules, so allocator code tested on
// a laptop behaves the same on a GPU.
//
// The calls mirror the CUDA driver API one to one (cuMemGetAllocationGranularity, cuMemCreate,
// cuMemRelease, cuMemAddressReserve, cuMemAddressFree, cuMemMap, cuMemUnmap, cuMemSetAccess,
// cuEventCreate/Record/Query/Destroy, cuStreamWaitEvent, cuCtxSynchronize, cuStreamIsCapturing,
// cuStreamCreate/Destroy, cuDeviceCanAccessPeer) and return CUDA's error codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace stalloc::vmm {

// Values are CUresult's, so a status from either backend reads the same.
enum class Status : int {
  Success = 0,
  InvalidValue = 1,
  OutOfMemory = 2,
  NotInitialized = 3,
  Deinitialized = 4,  // the driver is shutting down (process exit)
  NoDevice = 100,
  InvalidDevice = 101,
  InvalidContext = 201,
  InvalidHandle = 400,
  NotFound = 500,
  NotReady = 600,
  IllegalAddress = 700,    // a kernel faulted: the context is unusable from then on
  ContextDestroyed = 709,
  NotPermitted = 800,
  NotSupported = 801,
  CaptureUnsupported = 900,  // the call is not allowed while a stream is being captured
  Unknown = 999,
};

std::string_view status_name(Status s);

using DevicePtr = std::uintptr_t;    // a virtual address (CUdeviceptr)
using ChunkHandle = std::uint64_t;   // a physical allocation (CUmemGenericAllocationHandle)
using EventHandle = std::uint64_t;   // CUevent
using StreamHandle = std::uintptr_t; // CUstream; 0 is the default stream

enum class Access : std::uint8_t { None, Read, ReadWrite };

// What a driver has done so far; the runtime reports these as VMM calls.
struct DriverCounters {
  std::uint64_t creates = 0;
  std::uint64_t releases = 0;
  std::uint64_t reserves = 0;
  std::uint64_t frees = 0;  // address ranges freed
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t set_accesses = 0;
  // Bytes covered by successful set_access calls, once per device given access (the owner and
  // each peer of set_peers).
  std::uint64_t set_access_bytes = 0;
  std::uint64_t live_chunks = 0;
  std::uint64_t live_reservations = 0;
  std::uint64_t live_mappings = 0;
  std::uint64_t peak_live_mappings = 0;
  std::uint64_t chunk_bytes = 0;  // physical bytes currently created
  std::uint64_t peak_chunk_bytes = 0;
  std::uint64_t event_creates = 0;
  std::uint64_t event_destroys = 0;
  std::uint64_t event_records = 0;
  std::uint64_t event_queries = 0;
  std::uint64_t stream_waits = 0;
  std::uint64_t live_events = 0;
  std::uint64_t synchronizes = 0;     // host waits for the whole device
  std::uint64_t capture_queries = 0;  // stream_is_capturing calls
  // gpu_use: uses that may still run on the GPU when their memory is unmapped, or that another
  // stream's use of the same physical bytes did not wait for (host driver with lag only).
  std::uint64_t unguarded_uses = 0;
};

class Driver {
 public:
  virtual ~Driver() = default;

  virtual std::string_view name() const = 0;   // "host" or "cuda"
  virtual int device() const = 0;

  // Minimum granularity G of chunk sizes, reservations and mappings.
  virtual Status granularity(std::size_t* out) = 0;
  // The device's physical memory (cuDeviceTotalMem): what a memory fraction is a fraction of.
  virtual Status total_memory(std::size_t* out) = 0;
  // Whether chunks beyond total_memory cannot be created (a GPU), so that the runtime may fail
  // a request the live tensors and it cannot fit at once. False for an emulation that only
  // reports a size (the host backend without max_bytes).
  virtual bool total_memory_enforced() const { return true; }

  virtual Status create(ChunkHandle* out, std::size_t size) = 0;
  virtual Status release(ChunkHandle chunk) = 0;

  // alignment 0 means the granularity.
  virtual Status reserve(DevicePtr* out, std::size_t size, std::size_t alignment = 0) = 0;
  virtual Status free_reservation(DevicePtr ptr, std::size_t size) = 0;

  // Maps [offset, offset+size) of chunk at ptr. ptr lies in a reservation and is not mapped.
  // offset must be 0, as CUDA requires for now (the host backend refuses any other).
  virtual Status map(DevicePtr ptr, std::size_t size, std::size_t offset, ChunkHandle chunk) = 0;
  // Must cover exactly one mapped range, as cuMemUnmap does for a range mapped by one call.
  virtual Status unmap(DevicePtr ptr, std::size_t size) = 0;
  // Grants access over a range that is entirely mapped, to the owning device and to the peers
  // of set_peers.
  virtual Status set_access(DevicePtr ptr, std::size_t size, Access access) = 0;

  // The other devices whose kernels can be given access to this device's memory
  // (cuDeviceCanAccessPeer). Default: none.
  virtual Status accessible_peers(std::vector<int>* out);
  // Later set_access calls also grant access to these devices: peer access enabled with
  // cuCtxEnablePeerAccess does not cover cuMem mappings. Each must be in accessible_peers();
  // InvalidDevice otherwise, and nothing changes. Default: only an empty list is accepted.
  virtual Status set_peers(const std::vector<int>& devices);

  virtual Status event_create(EventHandle* out) = 0;
  virtual Status event_destroy(EventHandle event) = 0;
  virtual Status event_record(EventHandle event, StreamHandle stream) = 0;
  // Success when the GPU has passed the record, NotReady otherwise. Never blocks.
  virtual Status event_query(EventHandle event) = 0;
  // Makes future work on stream wait for the event; asynchronous, the host does not block.
  virtual Status stream_wait_event(StreamHandle stream, EventHandle event) = 0;
  // Blocks until all work queued on the device so far is done (cuCtxSynchronize), so every
  // recorded event then answers Success. Only where waiting is the alternative to failing (out
  // of memory, no mapping left). Default: NotSupported.
  virtual Status synchronize();
  // Whether work enqueued on stream is being captured into a CUDA graph (cuStreamIsCapturing,
  // any status but NONE). The legacy default stream (0) cannot be captured. Default: never.
  virtual Status stream_is_capturing(StreamHandle stream, bool* capturing);
  // A stream of the device's own (cuStreamCreate, non-blocking), for tools that replay traces
  // naming several streams. Default: NotSupported.
  virtual Status stream_create(StreamHandle* out);
  virtual Status stream_destroy(StreamHandle stream);

  // True when a DevicePtr can be read and written by the host (the host backend), so tests and
  // replay --verify can write and check data patterns.
  virtual bool host_accessible() const = 0;

  // Synchronous copies between host memory and a range with ReadWrite access, so data patterns
  // can be checked on every backend. The default copies directly when host_accessible(), and
  // returns NotSupported otherwise.
  virtual Status write_bytes(DevicePtr dst, const void* src, std::size_t size);
  virtual Status read_bytes(void* dst, DevicePtr src, std::size_t size);

  // A test instrument, standing for a kernel: work enqueued now on `stream` reads or writes
  // [ptr, ptr + size). The host driver with lag checks it against later unmaps and other
  // streams' uses of the same chunk bytes and counts what is not ordered after it in
  // counters().unguarded_uses; without lag the host runs everything at once and there is
  // nothing to check. Other drivers: NotSupported (the default).
  virtual Status gpu_use(StreamHandle stream, DevicePtr ptr, std::size_t size);

  virtual DriverCounters counters() const = 0;

  // Most chunk mappings that can be live at once; 0 when the driver knows no limit (CUDA: not
  // measured yet). The runtime keeps its plans within it (docs/runtime.md).
  virtual std::size_t mapping_limit() const { return 0; }
};

// Raised by a factory that cannot give a driver (no libcuda, no device, bad options).
class DriverUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace stalloc::vmm
