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

// A chunk of a run (one handle for several chunks) cannot be mapped alone: it is lent only
// once the run is split into chunks alone, and only if none of its chunks has a tenant.
TEST(IdleChunkLender, LendsAChunkOfARunOnlyOnceTheRunIsSplit) {
  PoolOfRuns f({2, 3});
  PlanPool& pool = f.pool;
  IdleChunkLender unsplit(pool);
  unsplit.lend_any();
  EXPECT_FALSE(unsplit.borrow().has_value());

  std::vector<std::uint32_t> asked;
  TestReclaimer splitting;
  splitting.split = [&](std::uint32_t head) {
    asked.push_back(head);
    return pool.split_run(head);
  };
  IdleChunkLender lender(pool, splitting);
  StreamMask sync = 0;
  const ChunkPiece tenant{4, 0, kWhole};
  ASSERT_TRUE(pool.try_occupy(std::span<const ChunkPiece>(&tenant, 1), &sync));
  lender.lend_any();
  std::set<std::uint32_t> lent;
  while (auto c = lender.borrow()) {
    EXPECT_TRUE(pool.alone(c->index));
    EXPECT_EQ(c->chunk.handle, pool.handle(c->index));
    lent.insert(c->index);
  }
  EXPECT_EQ(lent, (std::set<std::uint32_t>{0, 1}));
  EXPECT_EQ(asked, (std::vector<std::uint32_t>{0}));  // never the run with a tenant
  EXPECT_EQ(pool.run_length(2), 3u);
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
  // The budget chunk is idle only while its Dynamic slot lives: once emptied it goes back to
  // the pool rather than stay parked for later tensors. The others may be parked.
  EXPECT_TRUE(f.lender.wanted(3));
  for (std::uint32_t c : {2u, 4u, 5u}) EXPECT_FALSE(f.lender.wanted(c)) << "chunk " << c;
}

// Holds lent chunks as an arena would; detach gives one back with the stream that used it.
class FakeBorrower final : public ChunkBorrower {
 public:
  explicit FakeBorrower(IdleChunkLender& lender) : lender_(lender) {}
  // Borrows `n` chunks (any idle ones) and parks them, each as the page of its index.
  std::vector<LentChunk> borrow_and_park(std::size_t n) {
    lender_.lend_any();
    std::vector<LentChunk> out;
    while (out.size() < n) {
      auto c = lender_.borrow();
      if (!c) break;
      lender_.park(c->index, this, c->index);
      out.push_back(*c);
    }
    return out;
  }
  void detach(std::uint64_t page) override {
    detached.push_back(page);
    lender_.give_back(static_cast<std::uint32_t>(page), StreamSync::bit(1));
  }
  std::vector<std::uint64_t> detached;

 private:
  IdleChunkLender& lender_;
};

// A slot's chunks come back from a borrower only when that frees the slot: a piece held by a
// live tenant leaves the parked ones where they are.
TEST(IdleChunkLender, ReclaimsParkedChunksOnlyWhenThatFreesTheSlot) {
  LenderFixture f(3);
  FakeBorrower borrower(f.lender);
  const std::vector<LentChunk> lent = borrower.borrow_and_park(2);
  ASSERT_EQ(lent.size(), 2u);
  const LentChunk* a = &lent[0];
  const LentChunk* b = &lent[1];
  EXPECT_EQ(f.lender.parked(), 2u);
  ASSERT_TRUE(f.occupy(2, 0, 100));  // a live tenant on the third chunk
  const std::vector<ChunkPiece> blocked{{a->index, 0, kWhole}, {2, 50, 60}};
  EXPECT_FALSE(f.lender.reclaim(blocked));
  EXPECT_TRUE(borrower.detached.empty());
  const std::vector<ChunkPiece> slot{{a->index, 0, kWhole}, {b->index, 0, 10}};
  EXPECT_TRUE(f.lender.reclaim(slot));
  EXPECT_EQ(borrower.detached.size(), 2u);
  EXPECT_EQ(f.lender.parked(), 0u);
  EXPECT_EQ(f.lender.lent(), 0u);
  StreamMask sync = 0;
  EXPECT_TRUE(f.pool.try_occupy(slot, &sync));
  EXPECT_EQ(sync, StreamSync::bit(1));
}

// Following a plan, a parked chunk moves to another borrower only if the plan is done with it.
TEST(IdleChunkLender, TakesParkedChunksOnlyAsThePolicyAllows) {
  LenderFixture f(2);
  FakeBorrower holder(f.lender);
  FakeBorrower asker(f.lender);
  const std::vector<LentChunk> lent = holder.borrow_and_park(2);
  ASSERT_EQ(lent.size(), 2u);
  const LentChunk* b = &lent[1];
  const std::vector<std::uint32_t> none;
  const std::vector<std::uint32_t> done{b->index};
  f.lender.lend_done(none, none, 2);
  EXPECT_FALSE(f.lender.take_parked(&asker, 0, 0).has_value());
  f.lender.lend_done(none, done, 2);
  auto moved = f.lender.take_parked(&asker, 0, 0);
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->index, b->index);
  EXPECT_EQ(moved->chunk.users, StreamSync::bit(1));
  EXPECT_EQ(holder.detached, (std::vector<std::uint64_t>{b->index}));
  EXPECT_EQ(f.lender.parked(), 1u);
}

}  // namespace
}  // namespace stalloc
