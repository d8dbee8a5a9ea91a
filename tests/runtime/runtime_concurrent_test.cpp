#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "src/trace_replayer.h"
#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

// Several threads allocate, fill, check and free at once, on their own streams, while one of
// them steps iterations and another asks for statistics: every entry point under contention.
TEST(RuntimeConcurrent, ThreadsKeepTheirData) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  constexpr int kThreads = 4;
  constexpr int kRounds = 300;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      const auto stream = static_cast<vmm::StreamHandle>(0x100 * (t + 1));
      std::vector<std::pair<unsigned char*, std::size_t>> mine;
      for (int i = 0; i < kRounds; ++i) {
        const std::size_t sizes[] = {64, 700, 5000, kG / 2, kG + 17, 3 * kG};
        const std::size_t size = sizes[rng() % 6];
        auto* p = static_cast<unsigned char*>(rt.malloc(size, 0, stream));
        if (p == nullptr) continue;
        const auto tag = static_cast<unsigned char>(t * 31 + i);
        std::memset(p, tag, std::min<std::size_t>(size, 256));
        p[size - 1] = tag;
        if (i % 5 == 0) rt.record_stream(p, 0);
        mine.emplace_back(p, size);
        if (mine.size() > 6 || rng() % 2 == 0) {
          auto [q, qsize] = mine[rng() % mine.size()];
          if (q[0] != q[qsize - 1]) ++corrupted;
          rt.free(q, qsize, 0, stream);
          std::erase_if(mine, [q = q](const auto& m) { return m.first == q; });
        }
        if (t == 0 && i % 50 == 49) rt.step();
        if (t == 1 && i % 20 == 0) (void)rt.stats();
        if (t == 2 && i % 100 == 0) rt.empty_cache();
      }
      for (auto [q, qsize] : mine) {
        if (q[0] != q[qsize - 1]) ++corrupted;
        rt.free(q, qsize, 0, stream);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupted.load(), 0);
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.invalid_frees, 0u);
  EXPECT_EQ(s.allocations, s.frees);
}

// The replayer issues backward requests from a second thread, interleaved with the forward
// thread's in the trace order.
TEST(RuntimeConcurrent, ReplayWithABackwardThread) {
  auto driver = host_driver();
  Runtime rt(test_config("profile_iterations:1"), *driver);
  ReplayOptions options;
  options.verify = true;
  ReplayResult r = replay_trace(rt, periodic_trace(5), options);
  EXPECT_EQ(r.verify_errors, 0u);
  EXPECT_EQ(r.iterations[4].matches, allocations_per_iteration());
}

}  // namespace
}  // namespace stalloc
