// The MiniMalloc "challenging" instances A, B and H (tests/data/minimalloc, from google/minimalloc,
// Apache 2.0): the lower bound equals the capacity, so only an exact search places them; H
// only with the jittered restarts (seed 1: about 0.3 s of CPU in release). The others are
// measured in bench/dsa_bench.cpp.
#include <gtest/gtest.h>

#include <string>

#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_csv.h"
#include "tests/planner/dsa/dsa_test_util.h"

namespace stalloc {
namespace {

class DsaMiniMalloc : public ::testing::TestWithParam<const char*> {};

TEST_P(DsaMiniMalloc, PlacedWithinCapacity) {
  const std::string path =
      std::string(STALLOC_SOURCE_DIR) + "/tests/data/minimalloc/" + GetParam() + ".1048576.csv";
  DsaProblem problem;
  problem.buffers = read_dsa_csv_file(path).buffers;
  problem.capacity = 1048576;
  DsaOptions options;
  options.time_limit_seconds = 20;  // generous for sanitizer builds; about 1 s in release
  const DsaSolution s = solve_dsa(problem, options);
  const auto report = dsa_test::check(problem.buffers, s.offsets);
  ASSERT_TRUE(report.ok) << report.error;
  EXPECT_EQ(report.peak_bytes, s.peak_bytes);
  EXPECT_TRUE(s.within_capacity) << "peak " << s.peak_bytes;
  EXPECT_EQ(s.lower_bound_bytes, 1048576u);
}

INSTANTIATE_TEST_SUITE_P(Challenging, DsaMiniMalloc, ::testing::Values("A", "B", "H"));

}  // namespace
}  // namespace stalloc
