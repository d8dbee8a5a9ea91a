#include "trace/import_csv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "trace/import_support.h"

namespace stalloc {
namespace {

struct Interval {
  std::uint64_t id, lower, upper, size;
};

std::vector<Interval> parse(const std::string& csv) {
  std::vector<Interval> out;
  LineReader lines(csv);
  std::string_view line;
  lines.next(&line);
  while (lines.next(&line)) {
    auto f = split_csv(line);
    out.push_back({std::stoull(std::string(f[0])), std::stoull(std::string(f[1])), std::stoull(std::string(f[2])),
                   std::stoull(std::string(f[3]))});
  }
  return out;
}

bool overlaps(const Interval& a, const Interval& b) {
  return a.lower < b.upper && b.lower < a.upper;
}

std::uint64_t peak(const std::vector<Interval>& v) {
  std::map<std::uint64_t, std::int64_t> delta;
  for (const Interval& i : v) {
    delta[i.lower] += static_cast<std::int64_t>(i.size);
    delta[i.upper] -= static_cast<std::int64_t>(i.size);
  }
  std::int64_t cur = 0, best = 0;
  for (const auto& [t, d] : delta) best = std::max(best, cur += d);
  return static_cast<std::uint64_t>(best);
}

// Many shared endpoints, so the half-open tie rule matters.
std::string random_problem(std::uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::ostringstream out;
  out << "id,lower,upper,size\n";
  for (int id = 0; id < n; ++id) {
    std::uint64_t lo = rng() % 20, len = 1 + rng() % 8;
    out << id * 3 << ',' << lo << ',' << lo + len << ',' << 1 + rng() % 1000 << '\n';
  }
  return out.str();
}

TEST(ImportCsv, ImportThenExportKeepsOverlapsAndLowerBound) {
  for (std::uint32_t seed = 1; seed <= 30; ++seed) {
    std::string csv = random_problem(seed, 60);
    std::vector<Interval> before = parse(csv);
    Trace t = import_interval_csv(csv, "p.csv");
    ASSERT_EQ(validate_trace(t), "");
    EXPECT_EQ(lower_bound_bytes(t), peak(before));
    std::ostringstream out;
    write_interval_csv(t, out);
    std::vector<Interval> after = parse(out.str());
    ASSERT_EQ(after.size(), before.size());
    std::map<std::uint64_t, Interval> by_id;
    for (const Interval& i : after) by_id[i.id] = i;
    for (const Interval& a : before) {
      ASSERT_EQ(by_id.count(a.id), 1u);
      EXPECT_EQ(by_id[a.id].size, a.size);
      for (const Interval& b : before) {
        EXPECT_EQ(overlaps(a, b), overlaps(by_id[a.id], by_id[b.id]))
            << "seed " << seed << " ids " << a.id << ' ' << b.id;
      }
    }
    EXPECT_EQ(peak(after), peak(before));
  }
}

TEST(ImportCsv, TouchingIntervalsDoNotOverlap) {
  Trace t = import_interval_csv("id,lower,upper,size\n1,0,10,100\n2,10,20,50\n", "p.csv");
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.events[1].kind, EventKind::Free);  // 1 dies before 2 is born at time 10
  EXPECT_EQ(lower_bound_bytes(t), 100u);
  EXPECT_EQ(t.meta.at("source"), "csv");
}

TEST(ImportCsv, ExportOfPersistentUsesEventCount) {
  Trace t;
  Event a;
  a.id = 5;
  a.size = 8;
  t.events = {a};
  std::ostringstream out;
  write_interval_csv(t, out);
  EXPECT_EQ(out.str(), "id,lower,upper,size\n5,0,1,8\n");
}

TEST(ImportCsv, ExtraColumnsAndErrors) {
  Trace t = import_interval_csv("size,offset,upper,lower,id\n8,0,3,1,7\n", "p.csv");
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].id, 7u);
  auto error_of = [](const std::string& s) {
    try {
      import_interval_csv(s, "p.csv");
    } catch (const ParseError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("id,lower,size\n").find("p.csv:1: expected a header with columns id,lower,upper,size"),
            std::string::npos);
  EXPECT_NE(error_of("id,lower,upper,size\n1,5,5,8\n").find("p.csv:2: expected lower < upper"), std::string::npos);
  EXPECT_NE(error_of("id,lower,upper,size\n1,0,5,8\n1,1,2,3\n").find("p.csv:3: expected each id once"),
            std::string::npos);
  EXPECT_NE(error_of("id,lower,upper,size\n1,0,x,8\n").find("expected upper"), std::string::npos);
  EXPECT_NE(error_of("id,lower,upper,size\n1,0\n").find("expected 4 comma-separated"), std::string::npos);
}

}  // namespace
}  // namespace stalloc
