#include "planner/dsa/dsa_csv.h"

#include <gtest/gtest.h>

#include <sstream>

#include "common/error.h"

namespace stalloc {
namespace {

DsaCsv parse(const std::string& text) {
  std::istringstream in(text);
  return read_dsa_csv(in, "in.csv");
}

// The line number a ParseError names, or 0 when parsing succeeded.
std::size_t error_line(const std::string& text, std::string* message = nullptr) {
  try {
    parse(text);
  } catch (const ParseError& e) {
    if (message != nullptr) *message = e.what();
    return e.line();
  }
  return 0;
}

TEST(DsaCsv, ReadsProblem) {
  const DsaCsv csv = parse("id,lower,upper,size\n0,0,10,100\n1, 5 ,20,7\r\n\n");
  ASSERT_EQ(csv.buffers.size(), 2u);
  EXPECT_EQ(csv.buffers[1].id, 1u);
  EXPECT_EQ(csv.buffers[1].lower, 5u);
  EXPECT_EQ(csv.buffers[1].upper, 20u);
  EXPECT_EQ(csv.buffers[1].size, 7u);
  EXPECT_FALSE(csv.offsets.has_value());
}

TEST(DsaCsv, ReadsSolutionAndRoundTrips) {
  const DsaCsv csv = parse("id,lower,upper,size,offset\n3,0,10,100,64\n4,2,3,8,0\n");
  ASSERT_TRUE(csv.offsets.has_value());
  EXPECT_EQ((*csv.offsets)[0], 64u);
  std::ostringstream out;
  write_dsa_csv(out, csv.buffers, *csv.offsets);
  EXPECT_EQ(out.str(), "id,lower,upper,size,offset\n3,0,10,100,64\n4,2,3,8,0\n");
  const DsaCsv again = parse(out.str());
  EXPECT_EQ(again.buffers.size(), 2u);
  EXPECT_EQ(*again.offsets, *csv.offsets);
}

TEST(DsaCsv, RequiresHeader) {
  std::string message;
  EXPECT_EQ(error_line("0,0,10,100\n", &message), 1u);
  EXPECT_NE(message.find("in.csv:1"), std::string::npos) << message;
  EXPECT_EQ(error_line(""), 1u);
  EXPECT_EQ(error_line("id,upper,lower,size\n"), 1u);
}

TEST(DsaCsv, RejectsBadRows) {
  std::string message;
  EXPECT_EQ(error_line("id,lower,upper,size\n0,0,10,100\n1,0,10\n", &message), 3u);
  EXPECT_NE(message.find("columns"), std::string::npos) << message;
  EXPECT_EQ(error_line("id,lower,upper,size\n0,0,ten,100\n", &message), 2u);
  EXPECT_NE(message.find("upper"), std::string::npos) << message;
  EXPECT_EQ(error_line("id,lower,upper,size\n0,-1,10,100\n"), 2u);
  EXPECT_EQ(error_line("id,lower,upper,size\n0,10,10,100\n", &message), 2u);
  EXPECT_NE(message.find("lower < upper"), std::string::npos) << message;
  EXPECT_EQ(error_line("id,lower,upper,size\n0,0,10,0\n", &message), 2u);
  EXPECT_NE(message.find("size"), std::string::npos) << message;
  EXPECT_EQ(error_line("id,lower,upper,size\n0,0,10,1\n0,3,4,5\n", &message), 3u);
  EXPECT_NE(message.find("duplicate"), std::string::npos) << message;
  EXPECT_EQ(error_line("id,lower,upper,size\n0,0,10,1,5\n"), 2u);
  EXPECT_EQ(error_line("id,lower,upper,size\n0,0,99999999999999999999,1\n"), 2u);
}

TEST(DsaCsv, MissingFileIsAUsageError) {
  EXPECT_THROW(read_dsa_csv_file("/nonexistent/dir/x.csv"), UsageError);
}

}  // namespace
}  // namespace stalloc
