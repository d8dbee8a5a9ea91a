// What driver calls cost in host time, estimated without a GPU.
//
// Memory saved is not a win if the calls that saved it make an iteration slower: CUDA VMM calls
// cost tens to hundreds of microseconds each (docs/driver_costs.md has the figures and their
// sources). Every allocator, the runtime and each simulator model, reports its calls per kind in
// a CallTally; a CostTable turns a tally into seconds, the same way for all of them, so that the
// simulator's tables and the replay can show time beside bytes. The tables are estimates from
// published microbenchmarks and stated assumptions until tools/gpu_check.sh measures a GPU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vmm/driver.h"

namespace stalloc::vmm {

enum class CallKind : std::uint8_t {
  Create,        // cuMemCreate
  Release,       // cuMemRelease
  Reserve,       // cuMemAddressReserve
  AddressFree,   // cuMemAddressFree
  Map,           // cuMemMap
  Unmap,         // cuMemUnmap
  SetAccess,     // cuMemSetAccess (one call, whatever it covers)
  SetAccessExtra,  // each further granule (2 MiB) one cuMemSetAccess covers beyond its first
  EventCreate,   // cuEventCreate
  EventDestroy,  // cuEventDestroy
  EventRecord,   // cuEventRecord
  EventQuery,    // cuEventQuery
  StreamWait,    // cuStreamWaitEvent
  CudaMalloc,    // cudaMalloc (PyTorch's caching allocator)
  CudaFree,      // cudaFree, its implied device synchronisation apart
  DeviceSync,    // a host wait for the whole device (cudaFree, free-cached-and-retry, cuCtxSynchronize)
  CaptureQuery,  // cuStreamIsCapturing
};
inline constexpr std::size_t kCallKinds = 17;

// "create", "release", "reserve", "address_free", "map", "unmap", "set_access",
// "set_access_extra_granules", "event_create", "event_destroy", "event_record", "event_query",
// "stream_wait", "cuda_malloc", "cuda_free", "device_sync", "capture_query".
std::string_view call_kind_name(CallKind kind);
// The VMM calls proper (create .. set_access): what a steady iteration should not make.
bool is_vmm_call(CallKind kind);

// Calls made, per kind.
struct CallTally {
  std::array<std::uint64_t, kCallKinds> calls{};

  std::uint64_t& operator[](CallKind k) { return calls[static_cast<std::size_t>(k)]; }
  std::uint64_t operator[](CallKind k) const { return calls[static_cast<std::size_t>(k)]; }
  // Every call; SetAccessExtra counts granules, not calls, and is left out.
  std::uint64_t total() const;
  std::uint64_t vmm() const;  // the VMM calls proper
  CallTally& operator+=(const CallTally& other);
  CallTally& operator-=(const CallTally& other);
  friend CallTally operator-(CallTally a, const CallTally& b) { return a -= b; }
  friend bool operator==(const CallTally&, const CallTally&) = default;
};

// The calls a driver has counted. granule: the size SetAccessExtra counts in (2 MiB, the size
// the published per-call figures were measured at).
CallTally tally(const DriverCounters& counters, std::uint64_t granule = std::uint64_t{2} << 20);

// Host microseconds per call, per kind, for one GPU.
struct CostTable {
  std::string_view gpu;          // "a100", "h100"
  std::string_view description;  // the GPU and where the figures come from, in a line
  std::array<double, kCallKinds> us{};
  double operator[](CallKind k) const { return us[static_cast<std::size_t>(k)]; }
};

// nullptr for a GPU with no table.
const CostTable* find_cost_table(std::string_view gpu);
std::vector<std::string_view> cost_table_names();

// Estimated host time of the calls, in seconds.
double estimate_seconds(const CallTally& calls, const CostTable& table);

}  // namespace stalloc::vmm
