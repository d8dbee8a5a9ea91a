#include "tests/runtime/runtime_test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "vmm/host_driver.h"

namespace stalloc::testing_support {

void add_training_iteration(ThreadedTraceBuilder& b, std::uint64_t act, int layers) {
  std::vector<std::uint64_t> acts;
  for (int l = 0; l < layers; ++l) {
    acts.push_back(b.alloc(act + static_cast<std::uint64_t>(l) * 512));
    b.free(b.alloc(kG / 2 + 64));
  }
  for (int l = layers - 1; l >= 0; --l) {
    std::uint64_t grad = b.alloc(kG + 1000, 0, 1);
    b.free(acts[static_cast<std::size_t>(l)]);
    b.free(grad);
  }
  std::uint64_t a = b.alloc(256);
  std::uint64_t c = b.alloc(4);
  b.free(a);
  b.free(c);
}

std::uint64_t allocations_per_iteration(int layers) {
  return static_cast<std::uint64_t>(3 * layers + 2);
}

Trace periodic_trace(int iterations, std::uint64_t act, int layers) {
  ThreadedTraceBuilder b;
  for (int w = 0; w < 3; ++w) b.alloc(3 * kG + 100);
  for (int i = 0; i < iterations; ++i) {
    add_training_iteration(b, act, layers);
    b.next_iteration();
  }
  return b.trace();
}

vmm::HostLag lag_from_environment() {
  vmm::HostLag lag;
  if (const char* n = std::getenv("STALLOC_TEST_GPU_LAG")) lag.queries = static_cast<std::uint32_t>(std::stoul(n));
  if (const char* s = std::getenv("STALLOC_TEST_GPU_LAG_SEED")) lag.seed = std::stoull(s);
  return lag;
}

std::unique_ptr<vmm::Driver> host_driver(std::size_t max_bytes, std::size_t max_mappings) {
  vmm::HostDriverOptions o;
  o.granularity = kG;
  o.max_bytes = max_bytes;
  o.max_mappings = max_mappings;
  o.lag = lag_from_environment();
  return vmm::make_host_driver(o);
}

ReplayResult replay_verified(Runtime& rt, const Trace& trace) {
  ReplayOptions options;
  options.verify = true;
  ReplayResult r = replay_trace(rt, trace, options);
  EXPECT_EQ(r.verify_errors, 0u);
  EXPECT_EQ(r.failed_allocations, 0u);
  // Under STALLOC_TEST_GPU_LAG: no memory unmapped or shared with another stream before the
  // kernels that used it are known done (Driver::gpu_use).
  EXPECT_EQ(rt.driver().counters().unguarded_uses, 0u);
  EXPECT_EQ(r.unmapped_uses, 0u);
  return r;
}

RuntimeConfig test_config(const std::string& conf) {
  // The tests' keys replace these.
  return parse_runtime_config(conf, parse_runtime_config("backend:host,auto_step:false"));
}

PoolOfRuns::PoolOfRuns(const std::vector<std::uint32_t>& runs)
    : host(host_driver()), memory(*host, kG, 0), pool(memory) {
  std::size_t chunks = 0;
  for (std::uint32_t length : runs) chunks += length;
  EXPECT_TRUE(pool.grow_to(chunks, runs));
}

}  // namespace stalloc::testing_support
