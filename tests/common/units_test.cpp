#include "common/units.h"

#include <gtest/gtest.h>
#include <sstream>

#include "common/json.h"

namespace stalloc {
namespace {

TEST(Units, ParsesPlainAndSuffixedSizes) {
  EXPECT_EQ(parse_bytes("1048576"), 1048576u);
  EXPECT_EQ(parse_bytes("2MiB"), 2 * MiB);
  EXPECT_EQ(parse_bytes("24GB"), 24 * GiB);
  EXPECT_EQ(parse_bytes("1.5g"), 3 * GiB / 2);
  EXPECT_EQ(parse_bytes("512k"), 512 * KiB);
}

TEST(Units, RejectsGarbageAndOverflow) {
  EXPECT_FALSE(parse_bytes(""));
  EXPECT_FALSE(parse_bytes("12 apples"));
  EXPECT_FALSE(parse_bytes("-5"));
  EXPECT_FALSE(parse_bytes("99999999999999999999"));
  EXPECT_FALSE(parse_bytes("99999999999999G"));
  EXPECT_FALSE(parse_u64("12x"));
}

TEST(Units, FormatsBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 * MiB / 2), "1.50 MiB");
  EXPECT_EQ(format_bytes(2 * GiB), "2.00 GiB");
}

TEST(Json, WritesNestedContainersWithEscapes) {
  std::ostringstream s;
  JsonWriter w(s);
  w.begin_object().field("name", "a\"b\n").key("list").begin_array().value(1).value(2.5).end_array();
  w.field("ok", true).end_object();
  EXPECT_EQ(s.str(), R"({"name":"a\"b\n","list":[1,2.5],"ok":true})");
}

}  // namespace
}  // namespace stalloc
