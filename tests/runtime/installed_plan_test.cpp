#include "src/installed_plan.h"

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "src/physical_memory.h"
#include "vmm/fault_injecting_driver.h"
#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

constexpr std::uint32_t kSlots = 32;

// kSlots slots one after another, slot i on chunks {2i + 1, 2i}: no chunk run, so each slot has
// a view of its own, of two pages, in mapping stage i * kMappingStages / kSlots.
ChunkPlan plan_of_own_views() {
  ChunkPlan plan;
  plan.mode = PlanMode::Alias;
  plan.granularity = kG;
  plan.num_chunks = 2 * kSlots;
  plan.signature.allocations = kSlots;
  plan.signature.requests = 2 * kSlots;
  for (std::uint32_t i = 0; i < kSlots; ++i) {
    PlannedSlot s;
    s.ordinal = i;
    s.size = 2 * kG;
    s.start = 2 * i;
    s.end = 2 * i + 1;
    s.chunks = {2 * i + 1, 2 * i};
    plan.slots.push_back(s);
  }
  return plan;
}

// Writes (slot, page) into the first `pages` pages of slot k through its address; reads them
// back: a page that is not the slot's own chunk reads another slot's.
void write_pages(vmm::Driver& host, const InstalledPlan& plan, std::uint32_t k, std::uint64_t pages) {
  for (std::uint64_t page = 0; page < pages; ++page) {
    const std::array<std::uint32_t, 2> word{k, static_cast<std::uint32_t>(page)};
    ASSERT_EQ(host.write_bytes(plan.address(k) + page * kG, word.data(), sizeof(word)),
              vmm::Status::Success)
        << k;
  }
}

void check_pages(vmm::Driver& host, const InstalledPlan& plan, std::uint32_t k, std::uint64_t pages) {
  for (std::uint64_t page = 0; page < pages; ++page) {
    std::array<std::uint32_t, 2> word{};
    ASSERT_EQ(host.read_bytes(word.data(), plan.address(k) + page * kG, sizeof(word)),
              vmm::Status::Success);
    EXPECT_EQ(word[0], k);
    EXPECT_EQ(word[1], page);
  }
}

struct InstallerFixture {
  InstallerFixture() : host(host_driver()), memory(*host, kG, 0), pool(memory), sync(*host) {
    std::string why;
    plan = InstalledPlan::install(
        plan_of_own_views(), *host, pool, sync, no_reclaimer(), &why);
    EXPECT_NE(plan, nullptr) << why;
  }
  std::uint64_t mappings() const { return host->counters().live_mappings; }
  std::uint64_t access_calls() const { return host->counters().set_accesses; }
  // Writes slot k's number into each of its two pages through its address.
  void write(std::uint32_t k) { write_pages(*host, *plan, k, 2); }
  void check(std::uint32_t k) { check_pages(*host, *plan, k, 2); }
  std::unique_ptr<vmm::Driver> host;
  PhysicalMemory memory;
  PlanPool pool;
  StreamSync sync;
  std::unique_ptr<InstalledPlan> plan;
};

// Installed, nothing is mapped; each stage is mapped when the iteration first reaches it (its
// views together, one access call for the stage), the stages before it first; while the
// iteration does not follow the plan, no further stage is mapped.
TEST(InstalledPlan, ViewsAreMappedStageByStageAsTheIterationReachesThem) {
  InstallerFixture f;
  ASSERT_NE(f.plan, nullptr);
  static_assert(kSlots == 2 * InstalledPlan::kMappingStages, "two slots per stage");
  EXPECT_EQ(f.plan->view_count(), kSlots);
  EXPECT_EQ(f.mappings(), 0u);
  EXPECT_TRUE(f.plan->unmapped());
  EXPECT_EQ(f.plan->deferred_pages(), 2u * kSlots);

  ASSERT_TRUE(f.plan->map_first_stage());  // slots 0 and 1
  EXPECT_EQ(f.mappings(), 4u);
  EXPECT_EQ(f.access_calls(), 1u);
  EXPECT_FALSE(f.plan->unmapped());
  EXPECT_TRUE(f.plan->deferred());
  EXPECT_EQ(f.plan->deferred_pages(), 2u * kSlots - 4);

  ASSERT_TRUE(f.plan->ensure_mapped(10, true));  // stage 5: stages 1 to 5 too, slots 0 to 11
  EXPECT_EQ(f.mappings(), 24u);
  EXPECT_EQ(f.access_calls(), 6u);
  ASSERT_TRUE(f.plan->ensure_mapped(11, false));  // mapped already
  EXPECT_FALSE(f.plan->ensure_mapped(12, false));  // the iteration left the plan
  EXPECT_EQ(f.mappings(), 24u);
  for (std::uint32_t k = 0; k < 12; ++k) f.write(k);

  ASSERT_TRUE(f.plan->ensure_mapped(kSlots - 1, true));
  EXPECT_EQ(f.mappings(), 2u * kSlots);
  EXPECT_EQ(f.access_calls(), InstalledPlan::kMappingStages);
  EXPECT_FALSE(f.plan->deferred());
  EXPECT_EQ(f.plan->deferred_pages(), 0u);
  for (std::uint32_t k = 12; k < kSlots; ++k) f.write(k);
  // Every slot's pages are its own chunks, seen at its address after the views moved into their
  // stages: no slot's pattern was overwritten by another's.
  for (std::uint32_t k = 0; k < kSlots; ++k) f.check(k);
}

// A plan given to be followed maps every stage at once.
TEST(InstalledPlan, MapDeferredMapsEveryStage) {
  InstallerFixture f;
  ASSERT_NE(f.plan, nullptr);
  ASSERT_TRUE(f.plan->map_deferred());
  EXPECT_EQ(f.mappings(), 2u * kSlots);
  EXPECT_EQ(f.access_calls(), InstalledPlan::kMappingStages);
  EXPECT_FALSE(f.plan->deferred());
  for (std::uint32_t k = 0; k < kSlots; ++k) f.write(k);
  for (std::uint32_t k = 0; k < kSlots; ++k) f.check(k);
}

// A plan refused for the live mappings it needs leaves nothing behind: no pool chunk created,
// no address space reserved (the chunks of a refused alias plan stayed beside the online path:
// llama7b-tp4pp2vpp2 at the host's vm.max_map_count held 26 GiB for nothing).
TEST(InstalledPlan, APlanOverTheMappingRoomCreatesNoChunk) {
  auto host = host_driver();
  PhysicalMemory memory(*host, kG, 0);
  PlanPool pool(memory);
  StreamSync sync(*host);
  std::string why;
  std::uint64_t asked = 0;
  TestReclaimer short_of_room;
  short_of_room.room = [&](std::uint64_t needed) {
    asked = needed;
    return needed - 1;
  };
  auto plan = InstalledPlan::install(plan_of_own_views(), *host, pool, sync, short_of_room, &why);
  EXPECT_EQ(plan, nullptr);
  EXPECT_EQ(asked, 2u * kSlots);
  EXPECT_NE(why.find("live mappings limit"), std::string::npos) << why;
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(memory.reserved_bytes(), 0u);
  EXPECT_EQ(host->counters().creates, 0u);
  EXPECT_EQ(host->counters().reserves, 0u);
}

// Slots one after another, slot i on chunks[i] (whole chunks), each in a view of its own.
ChunkPlan plan_of_slots(const std::vector<std::vector<std::uint32_t>>& chunks) {
  ChunkPlan plan;
  plan.mode = PlanMode::Alias;
  plan.granularity = kG;
  plan.signature.allocations = chunks.size();
  plan.signature.requests = 2 * chunks.size();
  for (std::uint32_t i = 0; i < chunks.size(); ++i) {
    PlannedSlot s;
    s.ordinal = i;
    s.size = chunks[i].size() * kG;
    s.start = 2 * i;
    s.end = 2 * i + 1;
    s.chunks = chunks[i];
    for (std::uint32_t c : chunks[i]) plan.num_chunks = std::max<std::uint64_t>(plan.num_chunks, c + 1);
    plan.slots.push_back(s);
  }
  return plan;
}

struct RunsFixture {
  RunsFixture() : host(host_driver()), memory(*host, kG, 0), pool(memory), sync(*host) {
    splits.split = [this](std::uint32_t head) { return pool.split_run(head); };
  }
  // Runs are split in the pool itself, unless `splits` says otherwise.
  std::unique_ptr<InstalledPlan> install(ChunkPlan plan, const PoolClaims& claims) {
    std::string why;
    auto installed = InstalledPlan::install(std::move(plan), *host, pool, sync, splits, &why,
                                            claims);
    EXPECT_NE(installed, nullptr) << why;
    return installed;
  }
  // Every page of every slot written, then read back: a slot whose pages were not its own
  // chunks, or were mapped from the wrong part of a run, reads another's.
  void write_and_check(InstalledPlan& plan) {
    for (std::uint32_t k = 0; k < plan.slot_count(); ++k) {
      write_pages(*host, plan, k, plan.plan().slots[k].chunks.size());
    }
    for (std::uint32_t k = 0; k < plan.slot_count(); ++k) {
      check_pages(*host, plan, k, plan.plan().slots[k].chunks.size());
    }
  }
  std::unique_ptr<vmm::Driver> host;
  PhysicalMemory memory;
  PlanPool pool;
  StreamSync sync;
  TestReclaimer splits;
};

PoolClaims with_runs() {
  PoolClaims claims;
  claims.runs = true;
  return claims;
}

// Where the claims allow runs, chunks that every view holds together are one physical handle:
// one create for the pool's growth and one map per view for each.
TEST(InstalledPlan, ChunksHeldTogetherAreOneHandleMappedInOneCall) {
  RunsFixture f;
  auto plan = f.install(plan_of_slots({{0, 1, 2, 3}, {4, 5}, {6}}), with_runs());
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(f.host->counters().creates, 3u);
  EXPECT_EQ(f.pool.run_length(0), 4u);
  ASSERT_TRUE(plan->map_deferred());
  EXPECT_EQ(f.host->counters().maps, 3u);
  EXPECT_EQ(plan->live_mappings(), 3u);
  f.write_and_check(*plan);

  // Without: a chunk each.
  RunsFixture alone;
  auto singles = alone.install(plan_of_slots({{0, 1, 2, 3}, {4, 5}, {6}}), PoolClaims{});
  ASSERT_NE(singles, nullptr);
  ASSERT_TRUE(singles->map_deferred());
  EXPECT_EQ(alone.host->counters().creates, 7u);
  EXPECT_EQ(alone.host->counters().maps, 7u);
}

// A later plan numbered on its own would hold part of a run: it is renumbered onto the pool's
// runs (its run of four onto the pool's, its pair onto the pool's pair) and needs no chunk
// more, nor a map more than it has runs.
TEST(InstalledPlan, ALaterPlanIsRenumberedOntoThePoolsRuns) {
  RunsFixture f;
  auto first = f.install(plan_of_slots({{0, 1, 2, 3}, {4, 5}, {6}}), with_runs());
  ASSERT_NE(first, nullptr);
  auto second = f.install(plan_of_slots({{0, 1}, {2, 3, 4, 5}, {6}}), with_runs());
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(f.pool.size(), 7u);
  EXPECT_EQ(f.host->counters().creates, 3u);
  EXPECT_EQ(second->plan().slots[1].chunks, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(second->plan().slots[0].chunks, (std::vector<std::uint32_t>{4, 5}));
  ASSERT_TRUE(second->map_deferred());
  EXPECT_EQ(second->live_mappings(), 3u);
  f.write_and_check(*second);
}

// A plan of chunks alone over a pool of runs: the runs it may split are split (one release, a
// chunk each) rather than the pool grown; a run whose split is refused is not, and the pool
// grows instead.
TEST(InstalledPlan, RunsAreSplitForAPlanOfChunksAloneElseThePoolGrows) {
  const ChunkPlan apart = plan_of_slots({{0}, {1}, {2}, {3}, {4}, {5}, {6}});
  {
    RunsFixture f;
    ASSERT_NE(f.install(plan_of_slots({{0, 1, 2, 3}, {4, 5}, {6}}), with_runs()), nullptr);
    PoolClaims claims;
    claims.splittable.assign(7, false);
    claims.splittable[0] = claims.splittable[4] = true;
    auto plan = f.install(apart, claims);
    ASSERT_NE(plan, nullptr);
    EXPECT_EQ(f.pool.size(), 7u);
    EXPECT_TRUE(f.pool.alone(0));
    EXPECT_TRUE(f.pool.alone(4));
    EXPECT_EQ(f.host->counters().releases, 2u);
    ASSERT_TRUE(plan->map_deferred());
    EXPECT_EQ(plan->live_mappings(), 7u);
    f.write_and_check(*plan);
  }
  {
    RunsFixture f;
    ASSERT_NE(f.install(plan_of_slots({{0, 1, 2, 3}, {4, 5}, {6}}), with_runs()), nullptr);
    PoolClaims claims;
    claims.splittable.assign(7, true);
    int asked = 0;
    f.splits.split = [&](std::uint32_t) {
      ++asked;
      return false;
    };
    auto plan = f.install(apart, claims);
    ASSERT_NE(plan, nullptr);
    EXPECT_GT(asked, 0);
    EXPECT_EQ(f.pool.size(), 13u);  // chunk 6 and six new ones
    EXPECT_EQ(f.pool.run_length(0), 4u);
    ASSERT_TRUE(plan->map_deferred());
    f.write_and_check(*plan);
  }
}

// A run split while its view has a live tenant elsewhere: the view keeps every other mapping
// (the tenant's bytes stay where they were), the run's chunks are mapped one by one in its
// place, one access call.
TEST(InstalledPlan, ARunIsSplitInPlaceInAMappedView) {
  RunsFixture f;
  ChunkPlan offset = plan_of_slots({{0, 1}, {2, 3}});
  offset.mode = PlanMode::Offset;
  auto plan = f.install(std::move(offset), with_runs());
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->view_count(), 1u);
  EXPECT_EQ(f.pool.run_length(0), 2u);
  EXPECT_EQ(f.pool.run_length(2), 2u);
  ASSERT_TRUE(plan->map_deferred());
  EXPECT_EQ(plan->live_mappings(), 2u);
  f.write_and_check(*plan);
  const std::vector<InstalledPlan::RunPlace> places = plan->run_places(2);
  ASSERT_EQ(places.size(), 1u);
  EXPECT_EQ(places[0].page, 2u);
  const std::uint64_t access = f.host->counters().set_accesses;
  plan->unmap_run(places);
  ASSERT_TRUE(f.pool.split_run(2));
  plan->map_run_again(2, 2, places);
  EXPECT_EQ(plan->live_mappings(), 3u);
  EXPECT_EQ(f.host->counters().set_accesses - access, 1u);
  EXPECT_TRUE(f.pool.alone(2));
  EXPECT_TRUE(plan->maps(3));
  // Slot 0's bytes untouched; slot 1's pages are its chunks again, alone now.
  std::array<std::uint32_t, 2> word{};
  ASSERT_EQ(f.host->read_bytes(word.data(), plan->address(0) + kG, sizeof(word)),
            vmm::Status::Success);
  EXPECT_EQ(word[0], 0u);
  EXPECT_EQ(word[1], 1u);
  f.write_and_check(*plan);
  // Unmapped whole at the end: every mapping, the split run's included, goes.
  plan.reset();
  EXPECT_EQ(f.host->counters().live_mappings, 0u);
}

// A view the driver refuses to map a split run's chunk in again keeps a hole there, and the
// pool sets that chunk aside: no slot is handed an address with nothing mapped. The rest of the
// view, and its teardown, as before.
TEST(InstalledPlan, AChunkAViewCannotMapAgainAfterASplitIsSetAside) {
  auto host = host_driver();
  vmm::FaultInjectingDriver faulty(*host);
  PhysicalMemory memory(faulty, kG, 0);
  PlanPool pool(memory);
  StreamSync sync(faulty);
  ChunkPlan offset = plan_of_slots({{0, 1}, {2, 3}});
  offset.mode = PlanMode::Offset;
  std::string why;
  auto plan = InstalledPlan::install(
      std::move(offset), faulty, pool, sync, no_reclaimer(), &why, with_runs());
  ASSERT_NE(plan, nullptr) << why;
  ASSERT_TRUE(plan->map_deferred());
  const std::vector<InstalledPlan::RunPlace> places = plan->run_places(2);
  ASSERT_EQ(places.size(), 1u);
  plan->unmap_run(places);
  ASSERT_TRUE(pool.split_run(2));
  faulty.fail_nth(2, vmm::CallMask::Map);  // chunk 3's map
  plan->map_run_again(2, 2, places);
  EXPECT_EQ(faulty.injected(), 1u);
  EXPECT_EQ(plan->live_mappings(), 2u);  // the first run, chunk 2
  EXPECT_TRUE(pool.idle(2));
  EXPECT_FALSE(pool.idle(3));
  EXPECT_EQ(pool.idle_count(), 3u);
  StreamMask ignored = 0;
  const ChunkPiece piece{3, 0, static_cast<std::uint32_t>(kG)};
  EXPECT_FALSE(pool.try_occupy(std::span<const ChunkPiece>(&piece, 1), &ignored));
  plan.reset();
  EXPECT_EQ(host->counters().live_mappings, 0u);
}

}  // namespace
}  // namespace stalloc
