// Hand-computed expectations for the PyTorch caching allocator model: every number below follows
// from the constants of CUDACachingAllocator.cpp (512 B rounding, 1 MiB small limit, 2 MiB small
// segments, 20 MiB segments for 1-10 MiB, 2 MiB rounding from 10 MiB on).
#include "sim/pytorch_caching_model.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "sim/pytorch_alloc_conf.h"

namespace stalloc {
namespace {

constexpr std::uint64_t KB = 1024;
constexpr std::uint64_t MB = 1024 * 1024;

class Harness {
 public:
  explicit Harness(const std::string& conf = "", std::uint64_t capacity = 0)
      : model("pytorch", parse_pytorch_alloc_conf(conf), capacity) {}

  // Allocates and returns the address; fails the test on out-of-memory.
  std::uint64_t alloc(std::uint64_t size, std::uint32_t stream = 0) {
    std::uint64_t address = 0;
    EXPECT_TRUE(try_alloc(size, stream, &address)) << "allocation of " << size << " bytes failed";
    return address;
  }
  bool try_alloc(std::uint64_t size, std::uint32_t stream, std::uint64_t* address) {
    Event e;
    e.id = next_id;
    e.size = size;
    e.stream = stream;
    if (!model.allocate(e, address)) return false;
    ids[*address] = next_id++;
    return true;
  }
  void release(std::uint64_t address) {
    Event e;
    e.kind = EventKind::Free;
    e.id = ids.at(address);
    model.deallocate(e);
    ids.erase(address);
  }

  PytorchCachingModel model;
  std::map<std::uint64_t, std::uint64_t> ids;  // address -> allocation id
  std::uint64_t next_id = 1;
};

TEST(PytorchCachingModel, RoundsRequestsTo512Bytes) {
  Harness h;
  EXPECT_EQ(h.model.round_size(1), 512u);
  EXPECT_EQ(h.model.round_size(512), 512u);
  EXPECT_EQ(h.model.round_size(513), 1024u);
  EXPECT_EQ(h.model.round_size(10 * MB + 1), 10 * MB + 512);
}

TEST(PytorchCachingModel, RoundupPowerOfTwoDivisions) {
  Harness h("roundup_power2_divisions:4");
  // 1.1 MiB lies in [1, 2) MiB, cut into 4 steps of 256 KiB: the next step is 1.25 MiB.
  EXPECT_EQ(h.model.round_size(1153434), MB + 256 * KB);
  EXPECT_EQ(h.model.round_size(4 * MB), 4 * MB);  // powers of two stay
  // Below 512 * divisions bytes, plain rounding applies.
  EXPECT_EQ(h.model.round_size(1000), 1024u);
}

TEST(PytorchCachingModel, SegmentSizes) {
  EXPECT_EQ(PytorchCachingModel::allocation_size(512), 2 * MB);
  EXPECT_EQ(PytorchCachingModel::allocation_size(MB), 2 * MB);
  EXPECT_EQ(PytorchCachingModel::allocation_size(MB + 512), 20 * MB);
  EXPECT_EQ(PytorchCachingModel::allocation_size(10 * MB - 512), 20 * MB);
  EXPECT_EQ(PytorchCachingModel::allocation_size(10 * MB), 10 * MB);
  EXPECT_EQ(PytorchCachingModel::allocation_size(11 * MB + 512), 12 * MB);
}

TEST(PytorchCachingModel, SmallRequestsShareTwoMegabyteSegments) {
  Harness h;
  std::uint64_t a = h.alloc(512 * KB);
  EXPECT_EQ(h.model.reserved_bytes(), 2 * MB);
  std::uint64_t b = h.alloc(512 * KB);
  EXPECT_EQ(b, a + 512 * KB);
  h.alloc(512 * KB);
  h.alloc(512 * KB);
  EXPECT_EQ(h.model.reserved_bytes(), 2 * MB);
  h.alloc(512 * KB);
  EXPECT_EQ(h.model.reserved_bytes(), 4 * MB);
  EXPECT_EQ(h.model.driver_calls()[vmm::CallKind::CudaMalloc], 2u);
  EXPECT_EQ(h.model.driver_calls().total(), 2u);
}

TEST(PytorchCachingModel, SmallBlocksSplitWhen512BytesRemain) {
  Harness h;
  std::uint64_t a = h.alloc(MB - 512);  // leaves 1 MiB + 512 in the 2 MiB segment
  std::uint64_t b = h.alloc(MB);        // leaves exactly 512 B: still split
  EXPECT_EQ(b, a + MB - 512);
  std::uint64_t c = h.alloc(100);
  EXPECT_EQ(c, a + 2 * MB - 512);
  EXPECT_EQ(h.model.reserved_bytes(), 2 * MB);
}

TEST(PytorchCachingModel, MidSizedRequestsShareTwentyMegabyteSegments) {
  Harness h;
  std::uint64_t a = h.alloc(5 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 20 * MB);
  EXPECT_EQ(h.alloc(5 * MB), a + 5 * MB);
  EXPECT_EQ(h.alloc(5 * MB), a + 10 * MB);
  EXPECT_EQ(h.alloc(5 * MB), a + 15 * MB);  // the last 5 MiB block, taken whole
  EXPECT_EQ(h.model.reserved_bytes(), 20 * MB);
  h.alloc(5 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 40 * MB);
}

TEST(PytorchCachingModel, LargeBlocksSplitOnlyWhenMoreThanOneMegabyteRemains) {
  Harness h;
  h.alloc(8 * MB);  // 20 MiB segment, a 12 MiB free remainder
  EXPECT_EQ(h.model.free_block_count(), 1u);
  h.alloc(11 * MB);  // 1 MiB would remain: not split
  EXPECT_EQ(h.model.free_block_count(), 0u);

  Harness g;
  g.alloc(8 * MB);
  g.alloc(10 * MB);  // 2 MiB remain: split
  EXPECT_EQ(g.model.free_block_count(), 1u);
  EXPECT_EQ(g.model.reserved_bytes(), 20 * MB);
}

TEST(PytorchCachingModel, BestFitBySizeThenAddress) {
  Harness h;
  std::uint64_t x12 = h.alloc(12 * MB);
  std::uint64_t x14 = h.alloc(14 * MB);
  std::uint64_t y12 = h.alloc(12 * MB);
  h.release(x12);
  h.release(x14);
  h.release(y12);
  EXPECT_EQ(h.alloc(13 * MB), x14);  // smallest block that fits
  EXPECT_EQ(h.alloc(11 * MB), x12);  // two 12 MiB blocks: the lower address
  EXPECT_EQ(h.alloc(11 * MB), y12);
  EXPECT_EQ(h.model.reserved_bytes(), 38 * MB);
}

TEST(PytorchCachingModel, FreedBlocksCoalesceWithinTheirSegment) {
  Harness h;
  std::uint64_t a = h.alloc(5 * MB);
  std::uint64_t b = h.alloc(5 * MB);
  h.release(a);
  h.release(b);
  EXPECT_EQ(h.model.free_block_count(), 1u);
  EXPECT_EQ(h.alloc(19 * MB), a);  // the whole segment again
  EXPECT_EQ(h.model.reserved_bytes(), 20 * MB);
}

TEST(PytorchCachingModel, StreamsDoNotShareBlocks) {
  Harness h;
  std::uint64_t a = h.alloc(12 * MB, 0);
  h.release(a);
  std::uint64_t b = h.alloc(12 * MB, 1);
  EXPECT_NE(a, b);
  EXPECT_EQ(h.model.reserved_bytes(), 24 * MB);
  EXPECT_EQ(h.alloc(12 * MB, 0), a);
}

TEST(PytorchCachingModel, RetryReleasesCachedSegmentsUnderCapacity) {
  Harness h("", 40 * MB);
  std::uint64_t a = h.alloc(20 * MB);
  h.release(a);
  h.alloc(30 * MB);  // 20 cached + 30 > 40: the cached segment goes back to the driver
  EXPECT_EQ(h.model.reserved_bytes(), 30 * MB);
  EXPECT_EQ(h.model.segment_count(), 1u);
  // malloc; on the retry the device is synchronised and the cached segment freed; malloc.
  const vmm::CallTally calls = h.model.driver_calls();
  EXPECT_EQ(calls[vmm::CallKind::CudaMalloc], 2u);
  EXPECT_EQ(calls[vmm::CallKind::CudaFree], 1u);
  EXPECT_EQ(calls[vmm::CallKind::DeviceSync], 1u);
  EXPECT_EQ(calls.total(), 4u);
}

TEST(PytorchCachingModel, OutOfMemoryWhenLiveDataExceedsCapacity) {
  Harness h("", 40 * MB);
  h.alloc(20 * MB);
  std::uint64_t address = 0;
  EXPECT_FALSE(h.try_alloc(30 * MB, 0, &address));
  EXPECT_EQ(h.model.reserved_bytes(), 20 * MB);
}

TEST(PytorchCachingModel, MaxSplitSizeKeepsOversizeBlocksWhole) {
  Harness h("max_split_size_mb:100");
  std::uint64_t big = h.alloc(200 * MB);
  h.release(big);
  // At least max_split: an oversize block serves it only if less than 20 MiB larger.
  std::uint64_t b = h.alloc(150 * MB);
  EXPECT_NE(b, big);
  EXPECT_EQ(h.model.reserved_bytes(), 350 * MB);
  EXPECT_EQ(h.alloc(190 * MB), big);  // taken whole, not split
  EXPECT_EQ(h.model.free_block_count(), 0u);
  // Below max_split: oversize blocks are never used.
  h.release(big);
  std::uint64_t c = h.alloc(50 * MB);
  EXPECT_NE(c, big);
  EXPECT_EQ(h.model.reserved_bytes(), 400 * MB);
}

TEST(PytorchCachingModel, MaxSplitRetryReleasesOneOversizeBlockFirst) {
  Harness h("max_split_size_mb:100", 400 * MB);
  std::uint64_t big = h.alloc(200 * MB);
  std::uint64_t small = h.alloc(30 * MB);
  h.release(big);
  h.release(small);
  // 180 MiB may not take the 200 MiB block (not < 180 + 20). 230 cached + 180 > 400: the
  // oversize block that fits is released; the 30 MiB one stays cached.
  h.alloc(180 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 210 * MB);
  EXPECT_EQ(h.model.segment_count(), 2u);
}

TEST(PytorchCachingModel, GarbageCollectionReleasesOldBlocksFirst) {
  Harness h("garbage_collection_threshold:0.5", 100 * MB);
  std::uint64_t a = h.alloc(30 * MB);
  h.release(a);
  std::uint64_t b = h.alloc(40 * MB);
  h.release(b);
  // A miss with 70 MiB reserved > the 50 MiB threshold: the block unused for longer (a) goes,
  // which reclaims enough; b stays cached. (Without collection the retry would free both.)
  h.alloc(50 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 90 * MB);
  EXPECT_EQ(h.model.segment_count(), 2u);
}

TEST(PytorchCachingModel, ExpandableSegmentGrowsByPagesAtItsEnd) {
  Harness h("expandable_segments:True");
  std::uint64_t a = h.alloc(5 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 20 * MB);  // one 20 MiB large-pool page
  EXPECT_EQ(h.alloc(5 * MB), a + 5 * MB);
  std::uint64_t c = h.alloc(30 * MB);  // the free 10 MiB at the end grows by one page
  EXPECT_EQ(c, a + 10 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 40 * MB);
  EXPECT_EQ(h.model.segment_count(), 1u);
  std::uint64_t s = h.alloc(512 * KB);  // the small pool has its own segment, 2 MiB pages
  EXPECT_EQ(h.model.reserved_bytes(), 42 * MB);
  EXPECT_EQ(h.model.segment_count(), 2u);
  EXPECT_NE(s, a);
  // Two reservations; three pages created and mapped (20 + 20 MiB large, 2 MiB small), access set
  // once per growth, the growths covering 10 + 10 + 1 granules of 2 MiB.
  const vmm::CallTally calls = h.model.driver_calls();
  EXPECT_EQ(calls[vmm::CallKind::Reserve], 2u);
  EXPECT_EQ(calls[vmm::CallKind::Create], 3u);
  EXPECT_EQ(calls[vmm::CallKind::Map], 3u);
  EXPECT_EQ(calls[vmm::CallKind::SetAccess], 3u);
  EXPECT_EQ(calls[vmm::CallKind::SetAccessExtra], 9u + 9u + 0u);
  EXPECT_EQ(calls[vmm::CallKind::CudaMalloc], 0u);
}

TEST(PytorchCachingModel, ExpandableRetryUnmapsFreePages) {
  Harness h("expandable_segments:True", 60 * MB);
  std::uint64_t a = h.alloc(40 * MB);
  EXPECT_EQ(h.model.reserved_bytes(), 40 * MB);
  h.release(a);
  h.alloc(40 * MB, 1);  // another stream: 40 + 40 > 60, so the free pages are unmapped first
  EXPECT_EQ(h.model.reserved_bytes(), 40 * MB);
  // The retry synchronises once, unmaps and releases the two free pages.
  const vmm::CallTally calls = h.model.driver_calls();
  EXPECT_EQ(calls[vmm::CallKind::DeviceSync], 1u);
  EXPECT_EQ(calls[vmm::CallKind::Unmap], 2u);
  EXPECT_EQ(calls[vmm::CallKind::Release], 2u);
  EXPECT_EQ(calls[vmm::CallKind::Create], 4u);
}

TEST(PytorchAllocConf, ParsesPytorchSyntax) {
  PytorchAllocConf c = parse_pytorch_alloc_conf(
      "max_split_size_mb:128, garbage_collection_threshold:0.6,expandable_segments:True,"
      "roundup_power2_divisions:[256:1,512:2,>:8]");
  EXPECT_EQ(c.max_split_size, 128 * MB);
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.6);
  EXPECT_TRUE(c.expandable_segments);
  EXPECT_EQ(roundup_divisions_for(c, 100 * MB), 1u);   // below the first key
  EXPECT_EQ(roundup_divisions_for(c, 300 * MB), 1u);   // [256, 512) MiB
  EXPECT_EQ(roundup_divisions_for(c, 600 * MB), 8u);   // ">" from the last key on
  EXPECT_EQ(roundup_divisions_for(c, 5000 * MB), 8u);
  PytorchAllocConf d = parse_pytorch_alloc_conf("");
  EXPECT_FALSE(d.expandable_segments);
  EXPECT_EQ(roundup_divisions_for(d, 300 * MB), 0u);
}

TEST(PytorchAllocConf, RejectsBadInputWithTheKeyNamed) {
  auto message = [](const std::string& text) {
    try {
      parse_pytorch_alloc_conf(text);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("max_split_mb:100").find("unknown option 'max_split_mb'"), std::string::npos);
  EXPECT_NE(message("max_split_size_mb:20").find("too small"), std::string::npos);
  EXPECT_NE(message("garbage_collection_threshold:1.5").find("garbage_collection_threshold"), std::string::npos);
  EXPECT_NE(message("roundup_power2_divisions:3").find("power of 2"), std::string::npos);
  EXPECT_NE(message("expandable_segments:yes").find("True or False"), std::string::npos);
  EXPECT_NE(message("expandable_segments").find("KEY:VALUE"), std::string::npos);
  EXPECT_NE(message("backend:cudaMallocAsync").find("native"), std::string::npos);
}

}  // namespace
}  // namespace stalloc
