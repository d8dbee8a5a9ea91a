#include "src/trace_replayer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/units.h"

namespace stalloc {
namespace {

constexpr std::uint64_t kLine = 64;

std::uint64_t pattern_word(std::uint64_t id, std::uint64_t offset) {
  std::uint64_t x = id * 0x9e3779b97f4a7c15ull + offset + 1;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 32);
}

// The sparse lines a pattern covers: [offset, offset + length) pairs.
template <typename F>
void for_each_line(std::uint64_t size, F&& f) {
  f(std::uint64_t{0}, std::min(size, kLine));
  for (std::uint64_t at = MiB; at + kLine <= size; at += MiB) f(at, kLine);
  if (size > kLine) f(size - std::min(size - kLine, kLine), std::min(size - kLine, kLine));
}

void write_pattern(vmm::Driver& driver, vmm::DevicePtr base, std::uint64_t id, std::uint64_t size) {
  for_each_line(size, [&](std::uint64_t at, std::uint64_t length) {
    std::array<unsigned char, kLine> line{};
    for (std::uint64_t i = 0; i < length; ++i) {
      line[i] = static_cast<unsigned char>(pattern_word(id, at + i) & 0xff);
    }
    driver.write_bytes(base + at, line.data(), length);
  });
}

bool check_pattern(vmm::Driver& driver, vmm::DevicePtr base, std::uint64_t id, std::uint64_t size) {
  bool ok = true;
  for_each_line(size, [&](std::uint64_t at, std::uint64_t length) {
    std::array<unsigned char, kLine> line{};
    if (driver.read_bytes(line.data(), base + at, length) != vmm::Status::Success) {
      ok = false;
      return;
    }
    for (std::uint64_t i = 0; i < length; ++i) {
      if (line[i] != static_cast<unsigned char>(pattern_word(id, at + i) & 0xff)) ok = false;
    }
  });
  return ok;
}

void gpu_use(vmm::Driver& driver, vmm::StreamHandle stream, void* p, std::uint64_t size,
             ReplayResult* result) {
  if (size == 0) return;
  if (driver.gpu_use(stream, reinterpret_cast<vmm::DevicePtr>(p), size) ==
      vmm::Status::InvalidValue) {
    ++result->unmapped_uses;
  }
}

}  // namespace

ReplayResult replay_trace(Runtime& runtime, const Trace& trace, const ReplayOptions& options) {
  ReplayResult result;
  const int device = runtime.driver().device();
  // Every backend copies to and from its memory (the CUDA one with cuMemcpy, synchronously).
  const bool verify = options.verify;
  std::unordered_map<std::uint64_t, void*> live;
  std::uint32_t iteration = trace.events.empty() ? 0 : trace.events.front().iteration;
  RuntimeStats before = runtime.stats();
  std::size_t first_malloc = 0;

  auto close_iteration = [&] {
    if (options.wait_for_planning) runtime.wait_for_planning();
    RuntimeStats now = runtime.stats();
    result.peak_reserved_bytes = std::max(result.peak_reserved_bytes, now.peak_reserved_bytes);
    result.peak_allocated_bytes = std::max(result.peak_allocated_bytes, now.peak_allocated_bytes);
    if (now.plan_installs > before.plan_installs) runtime.reset_peak_stats();
    result.iterations.push_back({iteration, now.matches - before.matches,
                                 now.misses - before.misses, now.conflicts - before.conflicts,
                                 now.vmm_calls() - before.vmm_calls(),
                                 now.driver.creates - before.driver.creates,
                                 now.event_calls() - before.event_calls(),
                                 now.plan_installs - before.plan_installs, first_malloc});
    before = now;
    first_malloc = result.malloc_ns.size();
  };

  auto issue = [&](const Event& e) {
    if (e.iteration != iteration) {
      if (options.step) runtime.step();
      close_iteration();
      iteration = e.iteration;
    }
    const vmm::StreamHandle stream =
        options.streams.empty() ? static_cast<vmm::StreamHandle>(e.stream) : options.streams.at(e.stream);
    if (e.kind == EventKind::Alloc) {
      auto t0 = std::chrono::steady_clock::now();
      void* p = runtime.malloc(e.size, device, stream);
      if (options.time_mallocs) {
        auto t1 = std::chrono::steady_clock::now();
        result.malloc_ns.push_back(static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
      }
      if (p == nullptr) {
        ++result.failed_allocations;
        return;
      }
      // The kernels that write it, then (at the free) the last that read it: on a lagging host
      // driver, checked against unmaps and other streams' uses (Driver::gpu_use).
      gpu_use(runtime.driver(), stream, p, e.size, &result);
      if (verify) write_pattern(runtime.driver(), reinterpret_cast<vmm::DevicePtr>(p), e.id, e.size);
      live[e.id] = p;
      return;
    }
    auto it = live.find(e.id);
    if (it == live.end()) return;
    gpu_use(runtime.driver(), stream, it->second, e.size, &result);
    if (verify && !check_pattern(runtime.driver(), reinterpret_cast<vmm::DevicePtr>(it->second),
                                 e.id, e.size)) {
      ++result.verify_errors;
    }
    runtime.free(it->second, e.size, device, stream);
    live.erase(it);
  };

  bool two_threads = false;
  if (options.backward_thread) {
    for (const Event& e : trace.events) two_threads |= e.thread == 1;
  }
  if (!two_threads) {
    for (const Event& e : trace.events) issue(e);
  } else {
    // Turn-taking: each thread issues its events when the global index reaches them.
    std::mutex m;
    std::condition_variable cv;
    std::size_t turn = 0;
    auto run = [&](bool backward) {
      for (std::size_t i = 0; i < trace.events.size(); ++i) {
        if ((trace.events[i].thread == 1) != backward) continue;
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return turn == i; });
        lock.unlock();
        issue(trace.events[i]);
        lock.lock();
        ++turn;
        cv.notify_all();
      }
    };
    std::thread backward([&] { run(true); });
    run(false);
    backward.join();
  }
  if (options.step) runtime.step();
  close_iteration();
  for (auto& [id, p] : live) runtime.free(p, 0, device, 0);
  return result;
}

}  // namespace stalloc
