#include "src/plan_pool.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/runtime/runtime_test_support.h"

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
// the same streams to wait for.
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
      f.pool.vacate(tenants[k], used_by);
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
      ASSERT_EQ(f.occupy(pieces, &sync), expect) << "step " << step;
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

}  // namespace
}  // namespace stalloc
