#include <gtest/gtest.h>

#include <string>

#include "src/memory_snapshot.h"
#include "src/pickle_writer.h"

namespace stalloc {
namespace {

using namespace std::string_literals;

// The expected bytes were checked with Python: pickle.loads(b) ==
// {'a': [1, -2, 300000, 2**40, 'x', True, None, -2**40], 'b': {}}.
TEST(PickleWriter, WritesProtocolTwoPlainData) {
  PickleWriter w;
  w.begin_dict();
  w.str("a").begin_list();
  w.integer(1).integer(-2).integer(300000).integer(std::int64_t{1} << 40).str("x");
  w.boolean(true).none().integer(-(std::int64_t{1} << 40));
  w.end_list();
  w.str("b").begin_dict().end_dict();
  w.end_dict();
  const std::string expected =
      "\x80\x02}(X\x01\x00\x00\x00" "a](K\x01J\xfe\xff\xff\xffJ\xe0\x93\x04\x00"
      "\x8a\x06\x00\x00\x00\x00\x00\x01X\x01\x00\x00\x00x\x88N"
      "\x8a\x06\x00\x00\x00\x00\x00\xff" "eX\x01\x00\x00\x00" "b}(uu."s;
  EXPECT_EQ(w.finish(), expected);
}

TEST(PickleWriter, FinishAppendsStopOnce) {
  PickleWriter w;
  w.none();
  std::string first = w.finish();
  EXPECT_EQ(w.finish(), first);
  EXPECT_EQ(first, "\x80\x02N."s);
}

TEST(MemorySnapshot, HasSegmentsAndDeviceTraces) {
  SnapshotSegment seg;
  seg.address = 4096;
  seg.total_size = 8192;
  seg.blocks.push_back({4096 + 1024, 512, 500, true});
  std::string bytes = memory_snapshot_pickle(1, {seg}, {{true, 4096 + 1024, 500, 0, 7}});
  // The block sits inside the segment: the bytes before and after it are inactive blocks.
  std::size_t inactive = 0;
  for (std::size_t at = bytes.find("inactive"); at != std::string::npos;
       at = bytes.find("inactive", at + 1)) {
    ++inactive;
  }
  EXPECT_EQ(inactive, 2u);
  for (const char* key : {"segments", "device_traces", "total_size", "allocated_size",
                          "segment_type", "blocks", "active_allocated", "alloc", "time_us"}) {
    EXPECT_NE(bytes.find(key), std::string::npos) << key;
  }
  EXPECT_EQ(bytes.back(), '.');
}

}  // namespace
}  // namespace stalloc
