// GMLake's stitching with hand-computed sizes: requests of at least 512 MiB that find no single
// cached block are served by mapping free blocks side by side instead of new memory.
#include "sim/gmlake_model.h"

#include <gtest/gtest.h>

#include <map>

namespace stalloc {
namespace {

constexpr std::uint64_t MB = 1024 * 1024;

class Harness {
 public:
  explicit Harness(std::uint64_t capacity = 0) : model(PytorchAllocConf{}, capacity, 2 * MB, 512 * MB) {}
  std::uint64_t alloc(std::uint64_t size) {
    Event e;
    e.id = next_id;
    e.size = size;
    std::uint64_t a = 0;
    EXPECT_TRUE(model.allocate(e, &a));
    ids[a] = next_id++;
    return a;
  }
  void release(std::uint64_t address) {
    Event e;
    e.kind = EventKind::Free;
    e.id = ids.at(address);
    model.deallocate(e);
    ids.erase(address);
  }
  GmlakeModel model;
  std::map<std::uint64_t, std::uint64_t> ids;
  std::uint64_t next_id = 1;
};

TEST(GmlakeModel, StitchesFreeBlocksInsteadOfAllocating) {
  Harness h;
  std::uint64_t a = h.alloc(300 * MB);
  std::uint64_t b = h.alloc(300 * MB);
  h.release(a);
  h.release(b);
  const vmm::CallTally calls = h.model.driver_calls();
  std::uint64_t c = h.alloc(600 * MB);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(h.model.reserved_bytes(), 600 * MB);
  EXPECT_EQ(h.model.stitches(), 1u);
  // An address reserve, 300 chunk mappings, one set-access over all of them; no chunk created.
  const vmm::CallTally stitch = h.model.driver_calls() - calls;
  EXPECT_EQ(stitch[vmm::CallKind::Reserve], 1u);
  EXPECT_EQ(stitch[vmm::CallKind::Map], 300u);
  EXPECT_EQ(stitch[vmm::CallKind::SetAccess], 1u);
  EXPECT_EQ(stitch[vmm::CallKind::Create], 0u);
  EXPECT_EQ(stitch.total(), 302u);

  // Freed, the stitched range stays mapped and serves the next such request for free.
  h.release(c);
  std::uint64_t d = h.alloc(600 * MB);
  EXPECT_EQ(d, c);
  EXPECT_EQ(h.model.stitch_reuses(), 1u);
  EXPECT_EQ((h.model.driver_calls() - calls).total(), 302u);
  EXPECT_EQ(h.model.reserved_bytes(), 600 * MB);
}

TEST(GmlakeModel, RequestsBelowTheThresholdAreNotStitched) {
  Harness h;
  std::uint64_t a = h.alloc(300 * MB);
  std::uint64_t b = h.alloc(300 * MB);
  h.release(a);
  h.release(b);
  h.alloc(400 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 1000 * MB);
  EXPECT_EQ(h.model.stitches(), 0u);
}

TEST(GmlakeModel, TooLittleFreeMemoryAllocatesNewChunks) {
  Harness h;
  std::uint64_t a = h.alloc(300 * MB);
  h.release(a);
  h.alloc(600 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 900 * MB);
  EXPECT_EQ(h.model.stitches(), 0u);
}

TEST(GmlakeModel, LargestBlocksFirstAndTheOvershootIsSplitOff) {
  Harness h;
  std::uint64_t a = h.alloc(300 * MB);
  std::uint64_t b = h.alloc(400 * MB);
  h.release(a);
  h.release(b);
  h.alloc(600 * MB);  // 400 + 200 of the 300: 100 MiB stay free
  EXPECT_EQ(h.model.reserved_bytes(), 700 * MB);
  EXPECT_EQ(h.alloc(100 * MB), a + 200 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 700 * MB);
}

TEST(GmlakeModel, LargeRequestsAreWholeChunks) {
  Harness h;
  std::uint64_t a = h.alloc(10 * MB + 1);
  h.alloc(2 * MB);  // a took 12 MiB (a whole segment): a new 20 MiB segment
  EXPECT_EQ(h.model.reserved_bytes(), 32 * MB);
  h.release(a);
  EXPECT_EQ(h.alloc(12 * MB), a);
}

}  // namespace
}  // namespace stalloc
