// Cost per chunk of each VMM call (create, map, set_access, unmap, release) on each backend:
// cuda, host (backed by memfd/mmap) and host_unbacked (the books only, what the simulator runs).
// Every iteration takes a batch of chunks through the whole life cycle and times one step of it
// over the batch; the reported time is that step's time divided by the chunks (manual time, so
// the other steps do not count). Chunks are the driver's granularity (2 MiB on current
// GPUs and by default on the host), the unit of the published A100 figures.
//
// bin/bench_vmm --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
// The cuda benchmarks skip with an error when no CUDA driver or device is present.
// BM_MapSetAccessUnmap times the three calls a slot's reuse makes, map + set_access + unmap, per
// chunk, on the backed and the unbacked host driver: what the simulator saves by not mapping.
// BM_MapSetAccessUnmapAmongMappings times the same with 0, 10^4 and 10^5 other mappings live.
// BM_VmmCallSized times each call per handle of 1 to 32 granules (2 to 64 MiB): whether a call
// costs per call or per byte is the cost model's largest unknown (docs/driver_costs.md), and it
// decides what larger chunks would save.
// BM_EventCall times cuEventRecord, cuEventQuery (on a completed event) and cuStreamWaitEvent on
// the default stream, per call: the cost table's event entries are assumptions until a GPU
// measures them, and the runtime's markers (src/free_markers.h) trade records for waits.
// BM_VmmCallWhileBusy times map, set_access and unmap per chunk as BM_VmmCall does, while
// memsets of a 1 GiB buffer of its own keep the GPU busy (bench/busy_gpu.h); busy_at_end is the
// share of batches that ended with the load still running.
// BM_UnmapAcrossMappings times one cuMemUnmap over k adjacent mappings (k = 1, 4, 16, 64).
// BM_StreamCall times cuStreamIsCapturing on a stream of its own (the runtime asks it at each
// malloc and free off the default stream) and cuCtxSynchronize on an idle device (the floor of
// the out-of-memory path's one wait), per call.
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/busy_gpu.h"
#include "vmm/driver_factory.h"
#include "vmm/host_driver.h"
#include "vmm/va_reservation.h"

namespace stalloc::vmm {
namespace {

constexpr std::size_t kBatch = 64;
constexpr benchmark::IterationCount kIterations = 100;

enum class Step { Create, Map, SetAccess, Unmap, Release };

// One driver per backend for the whole run (a CUDA context is slow to make).
Driver* driver_for(const std::string& backend, std::string* why) {
  static std::map<std::string, std::unique_ptr<Driver>> drivers;
  static std::map<std::string, std::string> failures;
  if (auto it = drivers.find(backend); it != drivers.end()) return it->second.get();
  if (auto it = failures.find(backend); it != failures.end()) {
    *why = it->second;
    return nullptr;
  }
  try {
    if (backend == "host_unbacked") {
      HostDriverOptions options;
      options.backed = false;
      return (drivers[backend] = make_host_driver(options)).get();
    }
    return (drivers[backend] = make_driver(backend)).get();
  } catch (const DriverUnavailable& e) {
    *why = failures[backend] = e.what();
    return nullptr;
  }
}

class StepTimer {
 public:
  StepTimer(Step measured, Step step) : active_(measured == step) {
    if (active_) start_ = std::chrono::steady_clock::now();
  }
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;
  double seconds() const {
    if (!active_) return 0;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  bool active_;
  std::chrono::steady_clock::time_point start_;
};

bool ok(benchmark::State& state, Status s, const char* call) {
  if (s == Status::Success) return true;
  state.SkipWithError((std::string(call) + " failed: " + std::string(status_name(s))).c_str());
  return false;
}

// The whole life cycle of one batch; returns the seconds spent in `measured`, or -1 on failure.
double cycle(benchmark::State& state, Driver& driver, DevicePtr base, std::size_t g,
             Step measured, std::size_t batch = kBatch) {
  std::vector<ChunkHandle> chunks(batch);
  double seconds = 0;
  {
    StepTimer t(measured, Step::Create);
    for (auto& c : chunks) {
      if (!ok(state, driver.create(&c, g), "create")) return -1;
    }
    seconds += t.seconds();
  }
  {
    StepTimer t(measured, Step::Map);
    for (std::size_t i = 0; i < batch; ++i) {
      if (!ok(state, driver.map(base + i * g, g, 0, chunks[i]), "map")) return -1;
    }
    seconds += t.seconds();
  }
  {
    StepTimer t(measured, Step::SetAccess);
    for (std::size_t i = 0; i < batch; ++i) {
      if (!ok(state, driver.set_access(base + i * g, g, Access::ReadWrite), "set_access")) {
        return -1;
      }
    }
    seconds += t.seconds();
  }
  {
    StepTimer t(measured, Step::Unmap);
    for (std::size_t i = 0; i < batch; ++i) {
      if (!ok(state, driver.unmap(base + i * g, g), "unmap")) return -1;
    }
    seconds += t.seconds();
  }
  {
    StepTimer t(measured, Step::Release);
    for (auto c : chunks) {
      if (!ok(state, driver.release(c), "release")) return -1;
    }
    seconds += t.seconds();
  }
  return seconds;
}

// The backend's driver, its handle size (`granules` granules) and a range reserved for `batch`
// handles; nullptr (the benchmark skipped with the reason) when any of them cannot be had.
Driver* prepare(benchmark::State& state, const char* backend, std::size_t granules,
                std::size_t batch, std::size_t* bytes, VaReservation* range) {
  std::string why;
  Driver* driver = driver_for(backend, &why);
  if (driver == nullptr) {
    state.SkipWithError(why.c_str());
    return nullptr;
  }
  std::size_t g = 0;
  if (!ok(state, driver->granularity(&g), "granularity")) return nullptr;
  *bytes = g * granules;
  if (!ok(state, VaReservation::reserve(*driver, batch * *bytes, 0, range), "reserve")) {
    return nullptr;
  }
  return driver;
}

// Fills *chunks with new chunks of `bytes`; false (the benchmark skipped) when one fails.
bool create_all(benchmark::State& state, Driver& driver, std::size_t bytes,
                std::vector<ChunkHandle>* chunks) {
  for (auto& c : *chunks) {
    if (!ok(state, driver.create(&c, bytes), "create")) return false;
  }
  return true;
}

void BM_VmmCall(benchmark::State& state, const char* backend, Step step) {
  std::size_t g = 0;
  VaReservation range;
  Driver* driver = prepare(state, backend, 1, kBatch, &g, &range);
  if (driver == nullptr) return;
  for (auto _ : state) {
    const double seconds = cycle(state, *driver, range.base(), g, step);
    if (seconds < 0) break;
    state.SetIterationTime(seconds / static_cast<double>(kBatch));
  }
  state.counters["chunk_bytes"] = static_cast<double>(g);
}

// Named cuda_busy, so that the plain cuda benchmarks' filter leaves it out: it runs on cuda.
void BM_VmmCallWhileBusy(benchmark::State& state, const char* /*cuda_busy*/, Step step) {
  const char* backend = "cuda";
  constexpr std::size_t kLoadBytes = std::size_t{1} << 30;
  constexpr int kLoadPasses = 64;  // about 20 ms of memsets on an H200, a batch about 5 ms
  std::size_t g = 0;
  VaReservation range;
  Driver* driver = prepare(state, backend, 1, kBatch, &g, &range);
  if (driver == nullptr) return;
  std::string why;
  auto gpu = bench::BusyGpu::open(driver->device(), kLoadBytes, &why);
  if (!gpu) {
    state.SkipWithError(why.c_str());
    return;
  }
  double busy_batches = 0;
  double batches = 0;
  for (auto _ : state) {
    if (!gpu->load(kLoadPasses)) {
      state.SkipWithError("the memset load was refused");
      break;
    }
    const double seconds = cycle(state, *driver, range.base(), g, step);
    if (seconds < 0) break;
    busy_batches += gpu->busy() ? 1 : 0;
    batches += 1;
    state.SetIterationTime(seconds / static_cast<double>(kBatch));
    gpu->wait();
  }
  state.counters["busy_at_end"] = batches > 0 ? busy_batches / batches : 0;
}

// map + set_access + unmap of each chunk at base; seconds per chunk, or -1 on a failure.
double map_set_access_unmap(benchmark::State& state, Driver& driver, DevicePtr base, std::size_t g,
                            const std::vector<ChunkHandle>& chunks) {
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const DevicePtr ptr = base + i * g;
    if (!ok(state, driver.map(ptr, g, 0, chunks[i]), "map") ||
        !ok(state, driver.set_access(ptr, g, Access::ReadWrite), "set_access") ||
        !ok(state, driver.unmap(ptr, g), "unmap")) {
      return -1;
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
         static_cast<double>(chunks.size());
}

// map + set_access + unmap of a batch of chunks, again and again; time per chunk.
void BM_MapSetAccessUnmap(benchmark::State& state, const char* backend) {
  std::size_t g = 0;
  VaReservation range;
  Driver* driver = prepare(state, backend, 1, kBatch, &g, &range);
  std::vector<ChunkHandle> chunks(kBatch);
  if (driver == nullptr || !create_all(state, *driver, g, &chunks)) return;
  for (auto _ : state) {
    const double seconds = map_set_access_unmap(state, *driver, range.base(), g, chunks);
    if (seconds < 0) break;
    state.SetIterationTime(seconds);
  }
  for (auto c : chunks) driver->release(c);
  state.counters["chunk_bytes"] = static_cast<double>(g);
}

// The same with state.range(0) other mappings live (one chunk mapped again and again): whether
// the calls slow down as a plan's views and the arenas' pages add up to 10^4-10^5 mappings.
void BM_MapSetAccessUnmapAmongMappings(benchmark::State& state, const char* backend) {
  const auto held = static_cast<std::size_t>(state.range(0));
  std::size_t g = 0;
  VaReservation range;
  Driver* driver = prepare(state, backend, 1, kBatch, &g, &range);
  if (driver == nullptr) return;
  VaReservation others;
  ChunkHandle shared = 0;
  if (held > 0 && (!ok(state, VaReservation::reserve(*driver, held * g, 0, &others), "reserve") ||
                   !ok(state, driver->create(&shared, g), "create"))) {
    return;
  }
  std::size_t mapped = 0;
  for (; mapped < held; ++mapped) {
    if (!ok(state, driver->map(others.base() + mapped * g, g, 0, shared), "map (held)")) break;
  }
  std::vector<ChunkHandle> chunks(kBatch);
  for (auto& c : chunks) {
    if (mapped < held || !ok(state, driver->create(&c, g), "create")) break;
  }
  for (auto _ : state) {
    if (mapped < held) break;
    const double seconds = map_set_access_unmap(state, *driver, range.base(), g, chunks);
    if (seconds < 0) break;
    state.SetIterationTime(seconds);
  }
  for (auto c : chunks) {
    if (c != 0) driver->release(c);
  }
  for (std::size_t i = 0; i < mapped; ++i) driver->unmap(others.base() + i * g, g);
  if (shared != 0) driver->release(shared);
  state.counters["live_mappings"] = static_cast<double>(held);
}

BENCHMARK_CAPTURE(BM_MapSetAccessUnmapAmongMappings, cuda, "cuda")
    ->UseManualTime()
    ->Iterations(20)
    ->Arg(0)->Arg(10000)->Arg(100000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MapSetAccessUnmapAmongMappings, host_unbacked, "host_unbacked")
    ->UseManualTime()
    ->Iterations(20)
    ->Arg(0)->Arg(10000)->Arg(100000)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_MapSetAccessUnmap, host, "host")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MapSetAccessUnmap, host_unbacked, "host_unbacked")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The same calls on handles of state.range(0) granules; time per call.
void BM_VmmCallSized(benchmark::State& state, const char* backend, Step step) {
  constexpr std::size_t kSizedBatch = 8;
  std::size_t bytes = 0;
  VaReservation range;
  Driver* driver = prepare(state, backend, static_cast<std::size_t>(state.range(0)), kSizedBatch,
                           &bytes, &range);
  if (driver == nullptr) return;
  for (auto _ : state) {
    const double seconds = cycle(state, *driver, range.base(), bytes, step, kSizedBatch);
    if (seconds < 0) break;
    state.SetIterationTime(seconds / static_cast<double>(kSizedBatch));
  }
  state.counters["handle_bytes"] = static_cast<double>(bytes);
}

// One cuMemUnmap over state.range(0) adjacent mappings of a granule each (their range whole),
// time per call; the mappings made and given access untimed. cuda.h forbids unmapping part of
// a mapping, not several whole ones at once (NVIDIA's multi-device mmap sample does), and the
// arenas and plan views unmap runs of pages one call per page (21 us each on an H200): whether
// one call costs as one or as k decides whether to batch them. Skipped with the driver's error
// where it refuses (the host emulation: one mapping per unmap, as the runtime calls it).
void BM_UnmapAcrossMappings(benchmark::State& state, const char* backend) {
  const auto k = static_cast<std::size_t>(state.range(0));
  std::size_t g = 0;
  VaReservation range;
  Driver* driver = prepare(state, backend, 1, k, &g, &range);
  std::vector<ChunkHandle> chunks(k);
  if (driver == nullptr || !create_all(state, *driver, g, &chunks)) return;
  const DevicePtr base = range.base();
  for (auto _ : state) {
    for (std::size_t i = 0; i < k; ++i) {
      if (!ok(state, driver->map(base + i * g, g, 0, chunks[i]), "map")) return;
    }
    if (!ok(state, driver->set_access(base, k * g, Access::ReadWrite), "set_access")) return;
    const auto start = std::chrono::steady_clock::now();
    const Status s = driver->unmap(base, k * g);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s != Status::Success) {
      for (std::size_t i = 0; i < k; ++i) driver->unmap(base + i * g, g);
      state.SkipWithError(("one unmap over " + std::to_string(k) +
                           " mappings failed: " + std::string(status_name(s))).c_str());
      break;
    }
    state.SetIterationTime(seconds);
  }
  for (auto c : chunks) driver->release(c);
  state.counters["mappings"] = static_cast<double>(k);
}

BENCHMARK_CAPTURE(BM_UnmapAcrossMappings, cuda, "cuda")
    ->UseManualTime()
    ->Iterations(20)
    ->Arg(1)->Arg(4)->Arg(16)->Arg(64)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_UnmapAcrossMappings, host_unbacked, "host_unbacked")
    ->UseManualTime()
    ->Iterations(20)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond);

enum class EventStep { Record, Query, StreamWait };

void BM_EventCall(benchmark::State& state, const char* backend, EventStep step) {
  std::string why;
  Driver* driver = driver_for(backend, &why);
  if (driver == nullptr) {
    state.SkipWithError(why.c_str());
    return;
  }
  std::vector<EventHandle> events(kBatch);
  for (EventHandle& e : events) {
    if (!ok(state, driver->event_create(&e), "event_create")) return;
  }
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    for (EventHandle e : events) {
      if (!ok(state, driver->event_record(e, 0), "event_record")) return;
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Untimed: wait until every event completed, so that the timed queries find them done.
    for (EventHandle e : events) {
      Status s = Status::NotReady;
      while ((s = driver->event_query(e)) == Status::NotReady) {
      }
      if (!ok(state, s, "event_query")) return;
    }
    if (step != EventStep::Record) {
      start = std::chrono::steady_clock::now();
      for (EventHandle e : events) {
        const Status s = step == EventStep::Query ? driver->event_query(e)
                                                  : driver->stream_wait_event(0, e);
        if (!ok(state, s, step == EventStep::Query ? "event_query" : "stream_wait_event")) return;
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    state.SetIterationTime(seconds / static_cast<double>(kBatch));
  }
  for (EventHandle e : events) driver->event_destroy(e);
}

enum class StreamStep { CaptureQuery, Synchronize };

void BM_StreamCall(benchmark::State& state, const char* backend, StreamStep step) {
  std::string why;
  Driver* driver = driver_for(backend, &why);
  if (driver == nullptr) {
    state.SkipWithError(why.c_str());
    return;
  }
  StreamHandle stream = 0;
  if (!ok(state, driver->stream_create(&stream), "stream_create")) return;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < kBatch; ++i) {
      bool capturing = false;
      const Status s = step == StreamStep::CaptureQuery
                           ? driver->stream_is_capturing(stream, &capturing)
                           : driver->synchronize();
      if (!ok(state, s, step == StreamStep::CaptureQuery ? "stream_is_capturing" : "synchronize")) {
        return;
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(seconds / static_cast<double>(kBatch));
  }
  driver->stream_destroy(stream);
}

// One call of `bench` per step and backend, kIterations batches, time per call.
#define STALLOC_CALL_BENCH(bench, step_name, step, backend)                             \
  BENCHMARK_CAPTURE(bench, step_name/backend, #backend, step)                          \
      ->UseManualTime()                                                                \
      ->Iterations(kIterations)                                                        \
      ->Unit(benchmark::kMicrosecond)

STALLOC_CALL_BENCH(BM_EventCall, event_record, EventStep::Record, cuda);
STALLOC_CALL_BENCH(BM_EventCall, event_query, EventStep::Query, cuda);
STALLOC_CALL_BENCH(BM_EventCall, stream_wait, EventStep::StreamWait, cuda);
STALLOC_CALL_BENCH(BM_EventCall, event_record, EventStep::Record, host);
STALLOC_CALL_BENCH(BM_EventCall, event_query, EventStep::Query, host);
STALLOC_CALL_BENCH(BM_EventCall, stream_wait, EventStep::StreamWait, host);
STALLOC_CALL_BENCH(BM_VmmCallWhileBusy, map, Step::Map, cuda_busy);
STALLOC_CALL_BENCH(BM_VmmCallWhileBusy, set_access, Step::SetAccess, cuda_busy);
STALLOC_CALL_BENCH(BM_VmmCallWhileBusy, unmap, Step::Unmap, cuda_busy);
STALLOC_CALL_BENCH(BM_StreamCall, capture_query, StreamStep::CaptureQuery, cuda);
STALLOC_CALL_BENCH(BM_StreamCall, synchronize, StreamStep::Synchronize, cuda);
STALLOC_CALL_BENCH(BM_StreamCall, capture_query, StreamStep::CaptureQuery, host);
STALLOC_CALL_BENCH(BM_StreamCall, synchronize, StreamStep::Synchronize, host);

#define STALLOC_VMM_SIZED_BENCH(step_name, step, backend)                              \
  BENCHMARK_CAPTURE(BM_VmmCallSized, step_name/backend, #backend, step)                \
      ->UseManualTime()                                                                \
      ->Iterations(10)                                                                 \
      ->Arg(1)->Arg(2)->Arg(4)->Arg(10)->Arg(32)                                       \
      ->Unit(benchmark::kMicrosecond)

STALLOC_VMM_SIZED_BENCH(create, Step::Create, cuda);
STALLOC_VMM_SIZED_BENCH(map, Step::Map, cuda);
STALLOC_VMM_SIZED_BENCH(set_access, Step::SetAccess, cuda);
STALLOC_VMM_SIZED_BENCH(unmap, Step::Unmap, cuda);
STALLOC_VMM_SIZED_BENCH(release, Step::Release, cuda);
STALLOC_VMM_SIZED_BENCH(create, Step::Create, host_unbacked);

#define STALLOC_VMM_BENCH(step_name, step, backend) \
  STALLOC_CALL_BENCH(BM_VmmCall, step_name, step, backend)

STALLOC_VMM_BENCH(create, Step::Create, host);
STALLOC_VMM_BENCH(map, Step::Map, host);
STALLOC_VMM_BENCH(set_access, Step::SetAccess, host);
STALLOC_VMM_BENCH(unmap, Step::Unmap, host);
STALLOC_VMM_BENCH(release, Step::Release, host);
STALLOC_VMM_BENCH(create, Step::Create, host_unbacked);
STALLOC_VMM_BENCH(map, Step::Map, host_unbacked);
STALLOC_VMM_BENCH(set_access, Step::SetAccess, host_unbacked);
STALLOC_VMM_BENCH(unmap, Step::Unmap, host_unbacked);
STALLOC_VMM_BENCH(release, Step::Release, host_unbacked);
STALLOC_VMM_BENCH(create, Step::Create, cuda);
STALLOC_VMM_BENCH(map, Step::Map, cuda);
STALLOC_VMM_BENCH(set_access, Step::SetAccess, cuda);
STALLOC_VMM_BENCH(unmap, Step::Unmap, cuda);
STALLOC_VMM_BENCH(release, Step::Release, cuda);

}  // namespace
}  // namespace stalloc::vmm

BENCHMARK_MAIN();
