#include "trace/import_rmm.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace stalloc {
namespace {

std::string error_of(const std::string& text) {
  try {
    import_rmm_log(text, "rmm.csv");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(ImportRmm, RowsBecomeEventsWithRelativeTimes) {
  Trace t = import_rmm_log(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "140001,23:59:59.999000,allocate,0x7f0000000000,1024,0x0\n"
      "140002,23:59:59.999500,allocate,0x7f0000000400,2048,0x55aa\n"
      "140001,23:59:59.9996,allocate failure,0x0,1099511627776,0x0\n"
      "140001,00:00:00.000001,free,0x7f0000000000,1024,0x0\n"
      "140001,00:00:00.000002,free,0x7e0000000000,64,0x0\n",
      "/data/rmm.csv");
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].time_ns, 0);
  EXPECT_EQ(t.events[0].thread, 0u);
  EXPECT_EQ(t.events[1].time_ns, 500000);
  EXPECT_EQ(t.events[1].thread, 1u);
  EXPECT_EQ(t.events[1].stream, 1u);
  EXPECT_EQ(t.events[1].size, 2048u);
  // Past midnight: 23:59:59.999 -> 00:00:00.000001 is 1.001 ms later.
  EXPECT_EQ(t.events[2].kind, EventKind::Free);
  EXPECT_EQ(t.events[2].id, t.events[0].id);
  EXPECT_EQ(t.events[2].time_ns, 1001000);
  EXPECT_EQ(t.meta.at("skipped_failures"), "1");
  EXPECT_EQ(t.meta.at("skipped_unknown_frees"), "1");
  EXPECT_EQ(t.meta.at("source"), "rmm");
  EXPECT_EQ(t.meta.at("input"), "rmm.csv");
}

TEST(ImportRmm, ColumnsAreFoundByName) {
  Trace t = import_rmm_log("Time,Thread,Extra,Action,Stream,Size,Pointer\n12:00:00.5,7,x,allocate,0,10,4096\n", "r");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].size, 10u);
  EXPECT_EQ(t.events[0].time_ns, 0);
}

TEST(ImportRmm, ErrorsNameTheLine) {
  const std::string h = "Thread,Time,Action,Pointer,Size,Stream\n";
  EXPECT_NE(error_of("Thread,Time,Action,Pointer,Size\n").find("rmm.csv:1: expected a header"), std::string::npos);
  EXPECT_NE(error_of(h + "1,12:00:00.1,resize,0x10,8,0\n").find("rmm.csv:2: expected Action"), std::string::npos);
  EXPECT_NE(error_of(h + "1,noon,allocate,0x10,8,0\n").find("rmm.csv:2: expected Time"), std::string::npos);
  EXPECT_NE(error_of(h + "1,12:00:00.1,allocate,0x10\n").find("rmm.csv:2: expected 6 comma-separated"),
            std::string::npos);
  EXPECT_NE(error_of(h + "1,12:00:00.1,allocate,0x10,eight,0\n").find("expected Size"), std::string::npos);
  EXPECT_NE(error_of("").find("empty file"), std::string::npos);
}

}  // namespace
}  // namespace stalloc
