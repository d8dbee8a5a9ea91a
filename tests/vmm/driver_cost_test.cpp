#include "vmm/driver_cost.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace stalloc::vmm {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

TEST(DriverCost, TallyTakesEveryKindFromTheCounters) {
  DriverCounters c;
  c.creates = 1;
  c.releases = 2;
  c.reserves = 3;
  c.frees = 4;
  c.maps = 5;
  c.unmaps = 6;
  c.set_accesses = 2;
  c.set_access_bytes = 2 * MiB + 64 * MiB;  // one call over one granule, one over 32
  c.event_creates = 7;
  c.event_destroys = 8;
  c.event_records = 9;
  c.event_queries = 10;
  c.stream_waits = 11;
  const CallTally t = tally(c);
  EXPECT_EQ(t[CallKind::Create], 1u);
  EXPECT_EQ(t[CallKind::Release], 2u);
  EXPECT_EQ(t[CallKind::Reserve], 3u);
  EXPECT_EQ(t[CallKind::AddressFree], 4u);
  EXPECT_EQ(t[CallKind::Map], 5u);
  EXPECT_EQ(t[CallKind::Unmap], 6u);
  EXPECT_EQ(t[CallKind::SetAccess], 2u);
  EXPECT_EQ(t[CallKind::SetAccessExtra], 31u);  // 33 granules covered by 2 calls
  EXPECT_EQ(t[CallKind::EventCreate], 7u);
  EXPECT_EQ(t[CallKind::EventDestroy], 8u);
  EXPECT_EQ(t[CallKind::EventRecord], 9u);
  EXPECT_EQ(t[CallKind::EventQuery], 10u);
  EXPECT_EQ(t[CallKind::StreamWait], 11u);
  EXPECT_EQ(t[CallKind::CudaMalloc], 0u);
  // Extra granules are not calls.
  EXPECT_EQ(t.total(), 1u + 2 + 3 + 4 + 5 + 6 + 2 + 7 + 8 + 9 + 10 + 11);
  EXPECT_EQ(t.vmm(), 1u + 2 + 3 + 4 + 5 + 6 + 2);
}

TEST(DriverCost, EstimateIsTheSumOfCallsTimesTheirCost) {
  const CostTable* a100 = find_cost_table("a100");
  ASSERT_NE(a100, nullptr);
  CallTally t;
  t[CallKind::Create] = 10;
  t[CallKind::Map] = 10;
  t[CallKind::SetAccess] = 1;
  t[CallKind::SetAccessExtra] = 9;
  t[CallKind::Unmap] = 4;
  const double us = 10 * (*a100)[CallKind::Create] + 10 * (*a100)[CallKind::Map] +
                    (*a100)[CallKind::SetAccess] + 9 * (*a100)[CallKind::SetAccessExtra] +
                    4 * (*a100)[CallKind::Unmap];
  EXPECT_DOUBLE_EQ(estimate_seconds(t, *a100), us * 1e-6);
  // The published A100 figures (docs/driver_costs.md).
  EXPECT_DOUBLE_EQ(estimate_seconds(t, *a100), (10 * 193.0 + 10 * 1.5 + 36.0 + 9 * 1.5 + 4 * 26.0) * 1e-6);
  EXPECT_DOUBLE_EQ(estimate_seconds(CallTally{}, *a100), 0.0);
}

TEST(DriverCost, TalliesSubtractAndAddPerKind) {
  CallTally a;
  a[CallKind::Map] = 5;
  a[CallKind::EventQuery] = 3;
  CallTally b;
  b[CallKind::Map] = 2;
  const CallTally d = a - b;
  EXPECT_EQ(d[CallKind::Map], 3u);
  EXPECT_EQ(d[CallKind::EventQuery], 3u);
  CallTally sum = d;
  sum += b;
  EXPECT_EQ(sum, a);
}

TEST(DriverCost, TablesAreFoundByNameAndKindsHaveDistinctNames) {
  EXPECT_NE(find_cost_table("h100"), nullptr);
  EXPECT_EQ(find_cost_table("v100"), nullptr);
  EXPECT_EQ(cost_table_names().size(), 3u);
  // The measured H200 table: cuMemCreate an order of magnitude under the A100 assumption.
  const CostTable* h200 = find_cost_table("h200");
  ASSERT_NE(h200, nullptr);
  EXPECT_LT(h200->us[static_cast<std::size_t>(CallKind::Create)],
            find_cost_table("a100")->us[static_cast<std::size_t>(CallKind::Create)] / 10);
  std::set<std::string> names;
  for (std::size_t k = 0; k < kCallKinds; ++k) {
    names.insert(std::string(call_kind_name(static_cast<CallKind>(k))));
  }
  EXPECT_EQ(names.size(), kCallKinds);
  EXPECT_TRUE(is_vmm_call(CallKind::SetAccess));
  EXPECT_FALSE(is_vmm_call(CallKind::SetAccessExtra));
  EXPECT_FALSE(is_vmm_call(CallKind::CudaMalloc));
}

}  // namespace
}  // namespace stalloc::vmm
