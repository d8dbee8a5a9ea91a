#include "vmm/driver_cost.h"


namespace stalloc::vmm {
namespace {

constexpr std::array<std::string_view, kCallKinds> kNames = {
    "create",       "release",      "reserve",      "address_free",
    "map",          "unmap",        "set_access",   "set_access_extra_granules",
    "event_create", "event_destroy", "event_record", "event_query",
    "stream_wait",  "cuda_malloc",  "cuda_free",    "device_sync",
    "capture_query",
};

// docs/driver_costs.md gives the source of every figure: the published A100 microbenchmark the
// design brief quotes (cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap per 2 MiB chunk), and
// stated assumptions for the rest. No per-call figures for the H100 were found; its table repeats
// the A100's until tools/gpu_check.sh measures one.
constexpr std::array<double, kCallKinds> kA100 = {
    193.0,   // create
    30.0,    // release
    5.0,     // reserve
    5.0,     // address_free
    1.5,     // map
    26.0,    // unmap
    36.0,    // set_access
    1.5,     // set_access_extra_granules
    2.0,     // event_create
    2.0,     // event_destroy
    2.0,     // event_record
    0.5,     // event_query
    2.0,     // stream_wait
    235.5,   // cuda_malloc: create + reserve + map + set_access
    66.0,    // cuda_free: unmap + release + address_free + 5
    1000.0,  // device_sync
    0.5,     // capture_query (assumed: a host-side stream query, as event_query)
};

// Measured (tools/gpu_check.sh, bench_vmm BM_VmmCall/*/cuda, medians of 3 repetitions of 100
// batches of 64 chunks of 2 MiB; two runs on 2026-12-04, one H200, driver 580.159.04; the mean of
// the two medians; docs/results/2026-12-04-h200.md). set_access_extra_granules from
// BM_VmmCallSized (32 granules against 1). Not measured, kept from the A100 table: reserve,
// address_free, the event calls, device_sync and capture_query.
constexpr std::array<double, kCallKinds> kH200 = {
    8.6,     // create
    10.2,    // release
    5.0,     // reserve (assumed)
    5.0,     // address_free (assumed)
    6.6,     // map
    21.0,    // unmap
    22.1,    // set_access
    0.25,    // set_access_extra_granules
    2.0,     // event_create (assumed)
    2.0,     // event_destroy (assumed)
    2.0,     // event_record (assumed)
    0.5,     // event_query (assumed)
    2.0,     // stream_wait (assumed)
    42.3,    // cuda_malloc: create + reserve + map + set_access
    41.2,    // cuda_free: unmap + release + address_free + 5
    1000.0,  // device_sync (assumed)
    0.5,     // capture_query (assumed)
};

constexpr CostTable kTables[] = {
    {"a100", "A100: published VMM microbenchmark (cuMemCreate/Map/SetAccess/Unmap) + assumptions",
     kA100},
    {"h100", "H100: no published per-call figures; the A100's, unmeasured", kA100},
    {"h200", "H200: VMM calls measured by tools/gpu_check.sh (2026-12-04, driver 580); events assumed",
     kH200},
};

}  // namespace

std::string_view call_kind_name(CallKind kind) { return kNames[static_cast<std::size_t>(kind)]; }

bool is_vmm_call(CallKind kind) {
  return kind <= CallKind::SetAccess;
}

std::uint64_t CallTally::total() const {
  std::uint64_t sum = 0;
  for (std::size_t k = 0; k < kCallKinds; ++k) {
    if (static_cast<CallKind>(k) != CallKind::SetAccessExtra) sum += calls[k];
  }
  return sum;
}

std::uint64_t CallTally::vmm() const {
  std::uint64_t sum = 0;
  for (std::size_t k = 0; k < kCallKinds; ++k) {
    if (is_vmm_call(static_cast<CallKind>(k))) sum += calls[k];
  }
  return sum;
}

CallTally& CallTally::operator+=(const CallTally& other) {
  for (std::size_t k = 0; k < kCallKinds; ++k) calls[k] += other.calls[k];
  return *this;
}

CallTally& CallTally::operator-=(const CallTally& other) {
  for (std::size_t k = 0; k < kCallKinds; ++k) calls[k] -= other.calls[k];
  return *this;
}

CallTally tally(const DriverCounters& c, std::uint64_t granule) {
  CallTally t;
  t[CallKind::Create] = c.creates;
  t[CallKind::Release] = c.releases;
  t[CallKind::Reserve] = c.reserves;
  t[CallKind::AddressFree] = c.frees;
  t[CallKind::Map] = c.maps;
  t[CallKind::Unmap] = c.unmaps;
  t[CallKind::SetAccess] = c.set_accesses;
  const std::uint64_t granules = (c.set_access_bytes + granule - 1) / granule;
  t[CallKind::SetAccessExtra] = granules > c.set_accesses ? granules - c.set_accesses : 0;
  t[CallKind::EventCreate] = c.event_creates;
  t[CallKind::EventDestroy] = c.event_destroys;
  t[CallKind::EventRecord] = c.event_records;
  t[CallKind::EventQuery] = c.event_queries;
  t[CallKind::StreamWait] = c.stream_waits;
  t[CallKind::DeviceSync] = c.synchronizes;
  t[CallKind::CaptureQuery] = c.capture_queries;
  return t;
}

const CostTable* find_cost_table(std::string_view gpu) {
  for (const CostTable& table : kTables) {
    if (table.gpu == gpu) return &table;
  }
  return nullptr;
}

std::vector<std::string_view> cost_table_names() {
  std::vector<std::string_view> names;
  for (const CostTable& table : kTables) names.push_back(table.gpu);
  return names;
}

double estimate_seconds(const CallTally& calls, const CostTable& table) {
  double us = 0.0;
  for (std::size_t k = 0; k < kCallKinds; ++k) {
    us += static_cast<double>(calls.calls[k]) * table.us[k];
  }
  return us * 1e-6;
}

}  // namespace stalloc::vmm
