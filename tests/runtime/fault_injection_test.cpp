// Fault injection: the generator's tiny preset is replayed through the runtime on a
// FaultInjectingDriver, once per k, with the k-th driver call (create, reserve, map or
// set-access) failing. Whatever call fails - while profiling, installing a plan, mapping a window,
// growing a dynamic range or a packed arena - the failure must surface as a nullptr or a plan failure,
// the runtime must keep serving afterwards, no live tensor may be corrupted, and once the runtime
// is gone every chunk, reservation and mapping must have been given back to the driver.
//
// A seeded sample of k is tried (the first calls, the last calls and random ones in between);
// STALLOC_FAULT_ALL=1 tries every k.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "workload/generator.h"
#include "src/trace_replayer.h"
#include "tests/runtime/runtime_test_support.h"
#include "vmm/fault_injecting_driver.h"
#include "vmm/host_driver.h"

namespace stalloc {
namespace {

using namespace testing_support;

struct FaultRun {
  std::uint64_t calls = 0;            // faultable driver calls the run made
  std::uint64_t injected = 0;
  std::uint64_t failed_allocations = 0;
  std::uint64_t plan_failures = 0;
  std::uint64_t verify_errors = 0;
  bool served_after = false;          // a fresh allocation after the run succeeded
  vmm::DriverCounters after_destroy;  // the host driver's, once the runtime is gone
};

const Trace& tiny_trace() {
  static const Trace trace = generate_trace(preset("tiny"));
  return trace;
}

// The tiny preset's tensors are megabytes: chunks of 2 MiB (a GPU's granularity) keep the
// number of driver calls, and so the runs needed to fail each of them, small.
std::unique_ptr<vmm::Driver> gpu_grained_host_driver() {
  vmm::HostDriverOptions options;
  options.granularity = 2 << 20;
  return vmm::make_host_driver(options);
}

// Replays the tiny preset with the k-th faultable call failing (k = 0: none).
FaultRun run_with_fault(std::uint64_t k, const std::string& conf) {
  auto host = gpu_grained_host_driver();
  vmm::FaultInjectingDriver faulty(*host);
  FaultRun out;
  {
    Runtime rt(test_config(conf), faulty);
    faulty.fail_nth(k, vmm::CallMask::All);
    ReplayOptions options;
    options.verify = true;
    ReplayResult r = replay_trace(rt, tiny_trace(), options);
    out.calls = faulty.calls(vmm::CallMask::All);
    out.injected = faulty.injected();
    out.failed_allocations = r.failed_allocations;
    out.verify_errors = r.verify_errors;
    out.plan_failures = rt.stats().plan_failures;
    faulty.fail_nth(0, vmm::CallMask::All);
    const std::size_t size = (5 << 20) + 123;
    void* p = rt.malloc(size, 0, 0);
    if (p != nullptr) {
      std::memset(p, 0xa5, size);
      out.served_after = static_cast<unsigned char*>(p)[size - 1] == 0xa5;
      rt.free(p, size, 0, 0);
    }
  }
  out.after_destroy = host->counters();
  return out;
}

// Each run plans in the background (tens of milliseconds), so a unit test samples: the first
// and last calls (set-up and teardown paths) and a seeded spread in between.
std::vector<std::uint64_t> ks_to_try(std::uint64_t total) {
  constexpr std::uint64_t kEnds = 8;
  constexpr std::uint64_t kSample = 40;
  const char* all = std::getenv("STALLOC_FAULT_ALL");
  std::set<std::uint64_t> ks;
  if (total <= kSample || (all != nullptr && std::string(all) == "1")) {
    for (std::uint64_t k = 1; k <= total; ++k) ks.insert(k);
  } else {
    for (std::uint64_t k = 1; k <= kEnds; ++k) ks.insert(k);
    for (std::uint64_t k = total - kEnds + 1; k <= total; ++k) ks.insert(k);
    std::mt19937_64 rng(20260);
    std::uniform_int_distribution<std::uint64_t> pick(1, total);
    while (ks.size() < kSample) ks.insert(pick(rng));
  }
  return {ks.begin(), ks.end()};
}

void check_every_fault(const std::string& conf) {
  const FaultRun clean = run_with_fault(0, conf);
  ASSERT_EQ(clean.failed_allocations, 0u);
  ASSERT_EQ(clean.verify_errors, 0u);
  ASSERT_GT(clean.calls, 0u);
  std::uint64_t surfaced_as_nullptr = 0;
  std::uint64_t surfaced_as_plan_failure = 0;
  std::uint64_t absorbed = 0;
  const std::vector<std::uint64_t> ks = ks_to_try(clean.calls);
  for (std::uint64_t k : ks) {
    SCOPED_TRACE("failing faultable driver call " + std::to_string(k) + " of " +
                 std::to_string(clean.calls) + " (" + conf + ")");
    const FaultRun r = run_with_fault(k, conf);
    EXPECT_EQ(r.injected, 1u);
    EXPECT_EQ(r.verify_errors, 0u);
    EXPECT_TRUE(r.served_after);
    EXPECT_EQ(r.after_destroy.live_chunks, 0u);
    EXPECT_EQ(r.after_destroy.live_reservations, 0u);
    EXPECT_EQ(r.after_destroy.live_mappings, 0u);
    EXPECT_EQ(r.after_destroy.chunk_bytes, 0u);
    if (r.failed_allocations > 0) {
      ++surfaced_as_nullptr;
    } else if (r.plan_failures > 0) {
      ++surfaced_as_plan_failure;
    } else {
      ++absorbed;
    }
  }
  std::printf("[ faults   ] %s: %llu faultable calls, %zu faults injected: %llu nullptr, %llu plan "
              "failure, %llu absorbed (served another way)\n",
              conf.c_str(), static_cast<unsigned long long>(clean.calls), ks.size(),
              static_cast<unsigned long long>(surfaced_as_nullptr),
              static_cast<unsigned long long>(surfaced_as_plan_failure),
              static_cast<unsigned long long>(absorbed));
}

TEST(FaultInjection, EveryFailingCallIsReportedAndNothingLeaksInAliasMode) {
  check_every_fault("profile_iterations:1,mode:alias");
}

TEST(FaultInjection, EveryFailingCallIsReportedAndNothingLeaksInWindowedMode) {
  check_every_fault("profile_iterations:1,mode:windowed,windows:4");
}

// A failure that surfaces as an out-of-memory is reported in the statistics with a reason.
TEST(FaultInjection, AFailedCreateIsAnOomWithAReason) {
  auto host = host_driver();
  vmm::FaultInjectingDriver faulty(*host);
  {
    Runtime rt(test_config("profile_iterations:1"), faulty);
    faulty.fail_nth(1, vmm::CallMask::Create);
    EXPECT_EQ(rt.malloc(20 * kG, 0, 0), nullptr);
    const RuntimeStats s = rt.stats();
    EXPECT_EQ(s.ooms, 1u);
    EXPECT_FALSE(s.last_oom.reason.empty());
    void* p = rt.malloc(20 * kG, 0, 0);
    ASSERT_NE(p, nullptr);
    rt.free(p, 20 * kG, 0, 0);
  }
  EXPECT_EQ(host->counters().live_chunks, 0u);
  EXPECT_EQ(host->counters().live_reservations, 0u);
}

}  // namespace
}  // namespace stalloc
