#include "src/idle_chunk_lender.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

struct LenderFixture {
  explicit LenderFixture(std::size_t chunks)
      : host(host_driver()), memory(*host, kG, 0), pool(memory), lender(pool) {
    EXPECT_TRUE(pool.grow_to(chunks));
  }
  bool occupy(std::uint32_t chunk, std::uint32_t lo, std::uint32_t hi, StreamMask* sync = nullptr) {
    StreamMask ignored = 0;
    const ChunkPiece piece{chunk, lo, hi};
    return pool.try_occupy(std::span<const ChunkPiece>(&piece, 1), sync ? sync : &ignored);
  }
  std::unique_ptr<vmm::Driver> host;
  PhysicalMemory memory;
  PlanPool pool;
  IdleChunkLender lender;
};

constexpr auto kWhole = static_cast<std::uint32_t>(kG);

TEST(IdleChunkLender, LendsNothingUntilAllowed) {
  LenderFixture f(3);
  EXPECT_FALSE(f.lender.borrow().has_value());
  f.lender.lend_any();
  f.lender.lend_none();
  EXPECT_FALSE(f.lender.borrow().has_value());
  EXPECT_EQ(f.pool.idle_count(), 3u);
}

// Only wholly idle chunks are lent, each once, and a lent chunk is occupied for the plan too.
TEST(IdleChunkLender, LendsIdleChunksWholeAndOccupiesThem) {
  LenderFixture f(5);
  ASSERT_TRUE(f.occupy(0, 100, 200));  // a slot holds a piece of chunk 0
  f.lender.lend_any();
  std::set<std::uint32_t> lent;
  while (auto c = f.lender.borrow()) {
    EXPECT_EQ(c->chunk.handle, f.pool.handle(c->index));
    EXPECT_TRUE(lent.insert(c->index).second) << "chunk " << c->index << " lent twice";
  }
  EXPECT_EQ(lent, (std::set<std::uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(f.lender.lent(), 4u);
  EXPECT_EQ(f.pool.idle_count(), 0u);
  EXPECT_FALSE(f.occupy(3, 0, 10));  // a planned slot on a lent chunk conflicts
  f.lender.give_back(3, 0);
  EXPECT_EQ(f.lender.lent(), 3u);
  EXPECT_TRUE(f.pool.idle(3));
  EXPECT_TRUE(f.occupy(3, 0, 10));
}

// The streams that used a lent chunk come back with it: its next tenant is ordered after them.
TEST(IdleChunkLender, GivenBackChunkOrdersItsNextTenant) {
  LenderFixture f(1);
  f.lender.lend_any();
  auto c = f.lender.borrow();
  ASSERT_TRUE(c.has_value());
  f.lender.give_back(c->index, StreamSync::bit(2));
  StreamMask sync = 0;
  ASSERT_TRUE(f.occupy(0, 0, kWhole, &sync));
  EXPECT_EQ(sync, StreamSync::bit(2));
}

// Following a plan of 4 chunks in a pool of 6: the Dynamic slot's budget first, then the
// chunks past the plan, then those the plan is done with; never a chunk it still needs.
TEST(IdleChunkLender, FollowingAPlanLendsOnlyWhatItIsDoneWith) {
  LenderFixture f(6);
  const std::vector<std::uint32_t> budget{3};
  const std::vector<std::uint32_t> done{2};
  f.lender.lend_done(budget, done, 4);
  std::vector<std::uint32_t> order;
  while (auto c = f.lender.borrow()) order.push_back(c->index);
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], 3u);
  EXPECT_EQ(std::set<std::uint32_t>(order.begin() + 1, order.begin() + 3),
            (std::set<std::uint32_t>{4, 5}));
  EXPECT_EQ(order[3], 2u);
  EXPECT_TRUE(f.pool.idle(0));
  EXPECT_TRUE(f.pool.idle(1));
}

}  // namespace
}  // namespace stalloc
