#include "src/plan_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "tests/runtime/runtime_test_support.h"
#include "vmm/fault_injecting_driver.h"

namespace stalloc {
namespace {

using namespace testing_support;

constexpr auto kWhole = static_cast<std::uint32_t>(kG);

struct PoolFixture {
  explicit PoolFixture(std::size_t chunks) : host(host_driver()), memory(*host, kG, 0), pool(memory) {
    EXPECT_TRUE(pool.grow_to(chunks));
  }
  bool occupy(const std::vector<ChunkPiece>& pieces, StreamMask* sync = nullptr) {
    StreamMask ignored = 0;
    return pool.try_occupy(pieces, sync ? sync : &ignored);
  }
  std::unique_ptr<vmm::Driver> host;
  PhysicalMemory memory;
  PlanPool pool;
};

// The pieces of a tenant whose bytes start at `lo` in the first chunk and end at `hi_of_last` in
// the last, as the installer cuts them.
std::vector<ChunkPiece> pieces_of(const std::vector<std::uint32_t>& chunks, std::uint32_t lo,
                                  std::uint32_t hi_of_last) {
  std::vector<ChunkPiece> out;
  for (std::size_t j = 0; j < chunks.size(); ++j) {
    out.push_back({chunks[j], j == 0 ? lo : 0, j + 1 == chunks.size() ? hi_of_last : kWhole});
  }
  return out;
}

TEST(PlanPool, APartialTenantSharesItsChunkOnlyWithDisjointBytes) {
  PoolFixture f(3);
  ASSERT_TRUE(f.occupy({{0, 0, kWhole}}));
  EXPECT_FALSE(f.occupy({{0, 0, 10}}));
  ASSERT_TRUE(f.occupy({{1, 0, 10}}));
  EXPECT_TRUE(f.occupy({{1, 10, 20}}));
  EXPECT_FALSE(f.occupy({{1, 5, 15}}));
  EXPECT_FALSE(f.occupy({{1, 0, kWhole}}));
  // All or nothing: the idle chunk 2 is not taken when chunk 1's bytes are refused.
  EXPECT_FALSE(f.occupy({{2, 0, kWhole}, {1, 15, 25}}));
  EXPECT_TRUE(f.pool.idle(2));
  EXPECT_EQ(f.pool.idle_count(), 1u);
  f.pool.vacate(std::vector<ChunkPiece>{{1, 0, 10}}, 0);
  EXPECT_FALSE(f.pool.idle(1));
  f.pool.vacate(std::vector<ChunkPiece>{{1, 10, 20}}, 0);
  EXPECT_TRUE(f.pool.idle(1));
  EXPECT_EQ(f.pool.idle_count(), 2u);
}

// A random sequence of slot-shaped tenancies (partial head, whole chunks, partial tail) against a
// per-chunk list of live byte ranges and stream users: the same answers, the same idle count,
// the same streams to wait for. Tenancies start and end as pieces or as footprints, mixed.
TEST(PlanPool, AgreesWithAByteRangeModelOnRandomTenancies) {
  constexpr std::uint32_t kChunks = 150;
  PoolFixture f(kChunks);
  struct Range {
    std::uint32_t lo, hi;
  };
  std::vector<std::vector<Range>> live(kChunks);
  std::vector<StreamMask> users(kChunks, 0);
  std::vector<std::vector<ChunkPiece>> tenants;
  std::mt19937 rng(7);
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  int taken = 0, refused = 0;
  for (int step = 0; step < 20000; ++step) {
    if (!tenants.empty() && uniform(0, 2) == 0) {
      const std::size_t k = uniform(0, static_cast<std::uint32_t>(tenants.size() - 1));
      const StreamMask used_by = StreamMask{1} << uniform(0, 3);
      if (uniform(0, 1) == 0) {
        f.pool.vacate(tenants[k], used_by);
      } else {
        FootprintTable table;
        f.pool.vacate(table.at(table.add(tenants[k], kG)), used_by);
      }
      for (const ChunkPiece& p : tenants[k]) {
        auto& l = live[p.chunk];
        for (std::size_t i = 0; i < l.size(); ++i) {
          if (l[i].lo == p.lo && l[i].hi == p.hi) {
            l.erase(l.begin() + static_cast<std::ptrdiff_t>(i));
            break;
          }
        }
        users[p.chunk] |= used_by;
      }
      tenants.erase(tenants.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      const std::uint32_t count = uniform(1, 80);
      const std::uint32_t first = uniform(0, kChunks - count);
      std::vector<std::uint32_t> chunks(count);
      for (std::uint32_t j = 0; j < count; ++j) chunks[j] = first + j;
      const std::uint32_t lo = uniform(0, 1) == 0 ? 0 : uniform(0, kWhole - 1);
      const std::uint32_t hi = uniform(0, 1) == 0 ? kWhole : uniform(count == 1 ? lo + 1 : 1, kWhole);
      const auto pieces = pieces_of(chunks, lo, hi);
      bool expect = true;
      StreamMask expect_sync = 0;
      for (const ChunkPiece& p : pieces) {
        for (const Range& r : live[p.chunk]) expect = expect && !(r.lo < p.hi && p.lo < r.hi);
        expect_sync |= users[p.chunk];
      }
      StreamMask sync = 0;
      FootprintTable table;
      const bool taken_now = uniform(0, 1) == 0
                                 ? f.occupy(pieces, &sync)
                                 : f.pool.try_occupy(table.at(table.add(pieces, kG)), &sync);
      ASSERT_EQ(taken_now, expect) << "step " << step;
      if (expect) {
        ++taken;
        EXPECT_EQ(sync, expect_sync) << "step " << step;
        for (const ChunkPiece& p : pieces) {
          live[p.chunk].push_back({p.lo, p.hi});
          if (p.lo == 0 && p.hi == kWhole) users[p.chunk] = 0;
        }
        tenants.push_back(pieces);
      } else {
        ++refused;
      }
    }
    std::size_t idle = 0;
    for (std::uint32_t c = 0; c < kChunks; ++c) {
      ASSERT_EQ(f.pool.idle(c), live[c].empty()) << "chunk " << c << " step " << step;
      idle += live[c].empty();
    }
    ASSERT_EQ(f.pool.idle_count(), idle) << "step " << step;
  }
  // Both answers were exercised often.
  EXPECT_GT(taken, 1000);
  EXPECT_GT(refused, 1000);
}

// A footprint gives back the pieces it was made of (whole chunks grouped 64 to a word, a run
// crossing words, chunks out of order, partial pieces apart), and an empty one none.
TEST(FootprintTable, KeepsEveryPieceOfEveryFootprint) {
  std::mt19937 rng(3);
  auto draw = [&](std::uint32_t n) { return static_cast<std::uint32_t>(rng() % n); };
  std::vector<std::vector<ChunkPiece>> made;
  FootprintTable table;
  for (int t = 0; t < 300; ++t) {
    std::vector<ChunkPiece> pieces;
    const std::uint32_t first = draw(1000);
    const std::uint32_t count = draw(150);
    for (std::uint32_t j = 0; j < count; ++j) {
      const std::uint32_t chunk = draw(8) == 0 ? draw(2000) + 2000 : first + j;
      const bool part = draw(10) == 0;
      pieces.push_back({chunk, part ? 4096u : 0u, part ? 8192u : kWhole});
    }
    std::sort(pieces.begin(), pieces.end(), [](const ChunkPiece& a, const ChunkPiece& b) {
      return a.chunk < b.chunk;
    });
    auto same_chunk = [](const ChunkPiece& a, const ChunkPiece& b) { return a.chunk == b.chunk; };
    pieces.erase(std::unique(pieces.begin(), pieces.end(), same_chunk), pieces.end());
    if (rng() % 2 == 0) std::shuffle(pieces.begin(), pieces.end(), rng);
    ASSERT_EQ(table.add(pieces, kG), made.size());
    made.push_back(pieces);
  }
  ASSERT_EQ(table.size(), made.size());
  auto key = [](const ChunkPiece& p) { return std::tuple(p.chunk, p.lo, p.hi); };
  for (std::size_t i = 0; i < made.size(); ++i) {
    std::vector<ChunkPiece> back;
    table.at(static_cast<std::uint32_t>(i)).append_pieces(kG, &back);
    auto sorted = [&](std::vector<ChunkPiece> v) {
      std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>> keys;
      for (const ChunkPiece& p : v) keys.push_back(key(p));
      std::sort(keys.begin(), keys.end());
      return keys;
    };
    EXPECT_EQ(sorted(back), sorted(made[i])) << "footprint " << i;
    EXPECT_EQ(table.at(static_cast<std::uint32_t>(i)).empty(), made[i].empty());
  }
  table.clear();
  EXPECT_EQ(table.size(), 0u);
}

// Chunks in runs share one physical handle each: one create per run; a chunk alone takes a
// chunk PhysicalMemory has cached before one is created.
TEST(PlanPool, ARunOfChunksIsOneHandle) {
  auto host = host_driver();
  PhysicalMemory memory(*host, kG, 0);
  auto cached = memory.acquire();
  ASSERT_TRUE(cached.has_value());
  memory.give_back(*cached);
  const std::uint64_t creates = host->counters().creates;
  {
    PlanPool pool(memory);
    const std::vector<std::uint32_t> runs{3, 1, 2};
    ASSERT_TRUE(pool.grow_to(6, runs));
    EXPECT_EQ(host->counters().creates - creates, 2u);  // the runs; the chunk alone was cached
    EXPECT_EQ(memory.cached_bytes(), 0u);
    EXPECT_TRUE(pool.has_runs());
    EXPECT_EQ(pool.run_length(0), 3u);
    EXPECT_EQ(pool.run_head(2), 0u);
    EXPECT_TRUE(pool.alone(3));
    EXPECT_EQ(pool.run_head(5), 4u);
    EXPECT_EQ(pool.handle(0), pool.handle(2));
    EXPECT_NE(pool.handle(0), pool.handle(4));
    EXPECT_EQ(pool.idle_count(), 6u);
    EXPECT_EQ(memory.reserved_bytes(), 6 * kG);
  }
  // The runs released, the chunk alone cached.
  EXPECT_EQ(host->counters().releases, 2u);
  EXPECT_EQ(memory.reserved_bytes(), kG);
  EXPECT_EQ(memory.cached_bytes(), kG);
}

// A run whose handle the driver will not make (memory nearly all taken) is made of chunks
// alone: the pool grows all the same.
TEST(PlanPool, ARunTheDriverCannotMakeIsMadeOfChunksAlone) {
  auto host = host_driver();
  vmm::FaultInjectingDriver faulty(*host);
  PhysicalMemory memory(faulty, kG, 0);
  PlanPool pool(memory);
  faulty.fail_nth(1, vmm::CallMask::Create);
  const std::vector<std::uint32_t> runs{3, 2};
  ASSERT_TRUE(pool.grow_to(5, runs));
  EXPECT_EQ(faulty.injected(), 1u);
  EXPECT_TRUE(pool.alone(0) && pool.alone(1) && pool.alone(2));
  EXPECT_EQ(pool.run_length(3), 2u);
  EXPECT_EQ(pool.idle_count(), 5u);
  EXPECT_EQ(memory.reserved_bytes(), 5 * kG);
}

// Cached chunks serve the chunks alone first, then the shortest runs whole, split into chunks
// alone; a run they cannot cover whole stays a run.
TEST(PlanPool, CachedChunksReplaceTheShortestRuns) {
  auto host = host_driver();
  PhysicalMemory memory(*host, kG, 0);
  std::vector<Chunk> chunks;
  for (int i = 0; i < 4; ++i) chunks.push_back(*memory.acquire());
  for (const Chunk& c : chunks) memory.give_back(c);
  PlanPool pool(memory);
  EXPECT_EQ(pool.with_cached_chunks({4, 1, 2, 3}), (std::vector<std::uint32_t>{4, 1, 1, 1, 3}));
  EXPECT_EQ(pool.with_cached_chunks({1, 1, 1, 1, 8}), (std::vector<std::uint32_t>{1, 1, 1, 1, 8}));
  EXPECT_EQ(pool.with_cached_chunks({}), (std::vector<std::uint32_t>{}));
}

// A run with no tenant splits into chunks alone (its handle released, a chunk made or taken for
// each); one with a tenant does not.
TEST(PlanPool, ARunSplitsOnlyWithoutTenants) {
  PoolOfRuns f({3, 2});
  PlanPool& pool = f.pool;
  StreamMask sync = 0;
  const std::vector<ChunkPiece> tenant{{4, 0, kWhole}};
  ASSERT_TRUE(pool.try_occupy(tenant, &sync));
  EXPECT_FALSE(pool.split_run(3));
  EXPECT_EQ(pool.run_length(3), 2u);
  const vmm::ChunkHandle before = pool.handle(0);
  const std::uint64_t releases = f.host->counters().releases;
  ASSERT_TRUE(pool.split_run(0));
  EXPECT_EQ(f.host->counters().releases - releases, 1u);
  for (std::uint32_t c = 0; c < 3; ++c) {
    EXPECT_TRUE(pool.alone(c)) << c;
    EXPECT_NE(pool.handle(c), before) << c;
  }
  EXPECT_NE(pool.handle(0), pool.handle(1));
  EXPECT_EQ(f.memory.reserved_bytes(), 5 * kG);
  EXPECT_EQ(pool.idle_count(), 4u);
  EXPECT_TRUE(pool.split_run(1));  // alone already
}

}  // namespace
}  // namespace stalloc
