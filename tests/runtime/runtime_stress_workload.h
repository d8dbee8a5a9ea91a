// The runtime under every kind of contention at once, shared by the stress test (large, label
// stress) and its TSan-sized variant (label concurrent):
//   - a trainer thread repeats a two-signature training loop (variable sequence length) and
//     steps at each iteration end, so plans are made in the background, installed at
//     boundaries and switched between;
//   - random threads allocate and free at random sizes on several streams of their own, with
//     record_stream across their streams;
//   - a side thread installs plans with add_plan, reads statistics, empties the cache and
//     waits for planning.
// Every allocation is filled with a pattern derived from a unique tag and checked in full at
// free, so two live allocations sharing a byte are caught. The random threads' requests land in
// the trainer's iterations, so most iterations have a signature of their own: plan installs and
// cache evictions are constant, which is the point.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "planner/chunk/chunk_plan.h"
#include "tests/runtime/runtime_test_support.h"

namespace stalloc::testing_support {

struct StressShape {
  int random_threads = 6;
  int ops_per_thread = 3000;  // malloc or free calls of each random thread
  int streams_per_thread = 3;
  int trainer_iterations = 30;
};

struct StressOutcome {
  std::uint64_t operations = 0;  // malloc and free calls, all threads
  std::uint64_t failed_mallocs = 0;
  std::uint64_t corrupted = 0;   // allocations whose pattern changed before their free
  std::uint64_t plan_adds = 0;   // plans the side thread installed with add_plan
  std::uint64_t plan_add_failures = 0;
  std::uint64_t contended_installs = 0;  // plan installs while all threads ran (add_plan's too)
  std::uint64_t quiet_installs = 0;      // of iteration C's plan, run alone after them
  RuntimeStats stats;            // before the runtime is destroyed
  vmm::DriverCounters after_destroy;
};

namespace stress_detail {

// Writes tag-derived bytes over all of [p, p + size): the tag itself at both ends, one byte
// derived from it everywhere else.
inline void fill(unsigned char* p, std::size_t size, std::uint64_t tag) {
  const auto byte = static_cast<unsigned char>((tag * 0x9e3779b97f4a7c15ull) >> 56);
  std::memset(p, byte, size);
  std::memcpy(p, &tag, std::min(size, sizeof tag));
  if (size >= 2 * sizeof tag) std::memcpy(p + size - sizeof tag, &tag, sizeof tag);
}

inline bool intact(const unsigned char* p, std::size_t size, std::uint64_t tag) {
  const auto byte = static_cast<unsigned char>((tag * 0x9e3779b97f4a7c15ull) >> 56);
  std::uint64_t head = 0;
  std::memcpy(&head, p, std::min(size, sizeof head));
  std::uint64_t expect_head = 0;
  std::memcpy(&expect_head, &tag, std::min(size, sizeof tag));
  if (head != expect_head) return false;
  const std::size_t body_end = size >= 2 * sizeof tag ? size - sizeof tag : size;
  for (std::size_t i = sizeof tag; i < body_end; ++i) {
    if (p[i] != byte) return false;
  }
  if (size >= 2 * sizeof tag) {
    std::uint64_t tail = 0;
    std::memcpy(&tail, p + size - sizeof tag, sizeof tail);
    if (tail != tag) return false;
  }
  return true;
}

struct Live {
  unsigned char* p = nullptr;
  std::size_t size = 0;
  std::uint64_t tag = 0;
  vmm::StreamHandle stream = 0;
};

// Iterations of a training loop with different activation sizes: A and B alternate under
// contention, C runs alone at the end.
inline Trace three_signature_trace() {
  ThreadedTraceBuilder b;
  add_training_iteration(b, 2 * kG + 4096, 3);
  b.next_iteration();
  add_training_iteration(b, 3 * kG + 8192, 3);
  b.next_iteration();
  add_training_iteration(b, 4 * kG + 12288, 3);
  return b.trace();
}

}  // namespace stress_detail

inline StressOutcome run_runtime_stress(const StressShape& shape) {
  using namespace stress_detail;
  StressOutcome out;
  const Trace loop = three_signature_trace();
  PlanOptions plan_options;
  plan_options.granularity = kG;
  // TBB's own threads are not instrumented, so ThreadSanitizer reports races inside TBB; the
  // plans made here are tiny and need no parallel search.
  plan_options.dsa.parallel = false;
  const ChunkPlan plans[2] = {plan_iteration(loop, 0, plan_options),
                              plan_iteration(loop, 1, plan_options)};
  auto driver = host_driver();
  {
    Runtime rt(test_config("profile_iterations:1,plan_cache_size:4"), *driver);
    std::atomic<std::uint64_t> operations{0};
    std::atomic<std::uint64_t> failed{0};
    std::atomic<std::uint64_t> corrupted{0};
    std::atomic<bool> trainer_done{false};
    std::atomic<std::uint64_t> side_adds{0};  // add_plan calls the side thread has made

    // The kernels that write a tensor at its malloc and read it last before its free, on its
    // stream: under STALLOC_TEST_GPU_LAG the driver checks that the runtime unmaps and hands
    // memory to another stream only after them (Driver::gpu_use).
    auto use = [&](const unsigned char* p, std::size_t size, vmm::StreamHandle stream) {
      driver->gpu_use(stream, reinterpret_cast<vmm::DevicePtr>(p), size);
    };
    auto take = [&](Live l) {
      if (!intact(l.p, l.size, l.tag)) ++corrupted;
      use(l.p, l.size, l.stream);
      rt.free(l.p, l.size, 0, l.stream);
      ++operations;
    };
    auto give = [&](std::size_t size, vmm::StreamHandle stream, std::uint64_t tag, Live* l) {
      ++operations;
      auto* p = static_cast<unsigned char*>(rt.malloc(size, 0, stream));
      if (p == nullptr) {
        ++failed;
        return false;
      }
      fill(p, size, tag);
      use(p, size, stream);
      *l = {p, size, tag, stream};
      return true;
    };

    std::uint64_t trainer_tag = 1ull << 56;
    auto train = [&](std::uint32_t iteration) {
      std::vector<std::pair<std::uint64_t, Live>> live;
      for (const Event& e : loop.events) {
        if (e.iteration != iteration) continue;
        if (e.kind == EventKind::Alloc) {
          Live l;
          if (give(e.size, e.stream, ++trainer_tag, &l)) live.emplace_back(e.id, l);
          continue;
        }
        auto found = std::find_if(live.begin(), live.end(), [&](const auto& x) { return x.first == e.id; });
        if (found == live.end()) continue;
        take(found->second);
        live.erase(found);
      }
      rt.step();
    };

    std::thread trainer([&] {
      for (int it = 0; it < shape.trainer_iterations; ++it) train(static_cast<std::uint32_t>(it % 2));
      // However the threads were scheduled, the side thread's add_plan overlaps the training:
      // the trainer goes on stepping until it has made at least one.
      while (side_adds.load() == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        rt.step();
      }
      trainer_done = true;
    });

    std::vector<std::thread> randoms;
    for (int t = 0; t < shape.random_threads; ++t) {
      randoms.emplace_back([&, t] {
        std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 7919 + 1);
        std::uint64_t tag = static_cast<std::uint64_t>(t + 1) << 40;
        std::vector<Live> mine;
        auto stream_of = [&](std::uint64_t r) {
          return static_cast<vmm::StreamHandle>(0x1000 * (t + 1) +
                                                static_cast<int>(r % static_cast<std::uint64_t>(shape.streams_per_thread)));
        };
        for (int op = 0; op < shape.ops_per_thread; ++op) {
          const std::uint64_t r = rng();
          if (!mine.empty() && (mine.size() > 12 || r % 3 == 0)) {
            const std::size_t victim = static_cast<std::size_t>(rng() % mine.size());
            take(mine[victim]);
            mine[victim] = mine.back();
            mine.pop_back();
            continue;
          }
          std::size_t size = 0;
          switch (r % 4) {
            case 0: size = 1 + rng() % 4096; break;
            case 1: size = kG / 2 + rng() % (2 * kG); break;
            case 2: size = 3 * kG + rng() % (5 * kG); break;
            default: size = 1 + rng() % (kG / 4); break;
          }
          Live l;
          if (!give(size, stream_of(rng()), ++tag, &l)) continue;
          if (r % 7 == 0) rt.record_stream(l.p, stream_of(rng()));
          mine.push_back(l);
        }
        for (const Live& l : mine) take(l);
      });
    }

    std::thread side([&] {
      std::uint64_t round = 0;
      while (!trainer_done) {
        ++round;
        (void)rt.stats();
        if (round % 4 == 0) {
          try {
            rt.add_plan(plans[round % 8 == 0 ? 0 : 1]);
            ++out.plan_adds;
          } catch (const UsageError&) {
            ++out.plan_add_failures;
          }
          ++side_adds;
        }
        if (round % 5 == 0) rt.empty_cache();
        if (round % 9 == 0) rt.wait_for_planning();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });

    trainer.join();
    for (auto& th : randoms) th.join();
    side.join();
    rt.wait_for_planning();
    // Under contention the background plans race the boundaries (and on a loaded machine may all
    // finish too late or have their sizes change): whether one was installed depends on the
    // scheduling. After it, iteration C alone, each time waiting for the plan of the last:
    // planning in the background still works after all of the above.
    const std::uint64_t installs = rt.stats().plan_installs;
    for (int it = 0; it < 3; ++it) {
      train(2);
      rt.wait_for_planning();
    }
    out.contended_installs = installs;
    out.quiet_installs = rt.stats().plan_installs - installs;
    out.operations = operations;
    out.failed_mallocs = failed;
    out.corrupted = corrupted;
    out.stats = rt.stats();
  }
  out.after_destroy = driver->counters();
  return out;
}

}  // namespace stalloc::testing_support
