#include "trace/import_csv.h"

#include <algorithm>
#include <charconv>
#include <ostream>
#include <unordered_set>

#include "common/error.h"
#include "trace/import_support.h"

namespace stalloc {

namespace {

struct Interval {
  std::uint64_t id, lower, upper, size;
};

struct Endpoint {
  std::uint64_t time;
  bool is_alloc;  // false sorts first: a tensor freed at t does not overlap one allocated at t
  std::uint64_t id;
  std::uint64_t size;
  bool operator<(const Endpoint& o) const {
    if (time != o.time) return time < o.time;
    if (is_alloc != o.is_alloc) return !is_alloc;
    return id < o.id;
  }
};

}  // namespace

Trace import_interval_csv(std::string_view csv, const std::string& input_name) {
  LineReader lines(csv);
  std::string_view line;
  if (!lines.next(&line)) throw ParseError(input_name, 1, "expected the header id,lower,upper,size, got an empty file");
  const std::vector<std::size_t> col = find_columns(line, {"id", "lower", "upper", "size"}, input_name);
  std::size_t needed = 0;
  for (std::size_t c : col) needed = std::max(needed, c + 1);
  static constexpr const char* kNames[] = {"id", "lower", "upper", "size"};
  std::vector<Endpoint> points;
  std::unordered_set<std::uint64_t> ids;
  while (lines.next(&line)) {
    auto fail = [&](const std::string& what) { throw ParseError(input_name, lines.line_no(), what); };
    if (line.empty()) continue;
    std::vector<std::string_view> f = split_csv(line);
    if (f.size() < needed) {
      fail("expected " + std::to_string(needed) + " comma-separated fields, got " + std::to_string(f.size()));
    }
    std::uint64_t v[4];
    for (std::size_t k = 0; k < 4; ++k) {
      std::string_view s = f[col[k]];
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v[k]);
      if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
        fail(std::string("expected ") + kNames[k] + " (unsigned integer), got '" + std::string(s) + "'");
      }
    }
    Interval iv{v[0], v[1], v[2], v[3]};
    if (iv.lower >= iv.upper) {
      fail("expected lower < upper, got lower " + std::to_string(iv.lower) + " and upper " + std::to_string(iv.upper));
    }
    if (!ids.insert(iv.id).second) fail("expected each id once, got id " + std::to_string(iv.id) + " again");
    points.push_back({iv.lower, true, iv.id, iv.size});
    points.push_back({iv.upper, false, iv.id, iv.size});
  }
  std::sort(points.begin(), points.end());
  Trace trace;
  trace.events.reserve(points.size());
  for (const Endpoint& p : points) {
    Event e;
    e.kind = p.is_alloc ? EventKind::Alloc : EventKind::Free;
    e.id = p.id;
    e.size = p.size;
    trace.events.push_back(e);
  }
  trace.meta["source"] = "csv";
  trace.meta["input"] = file_basename(input_name);
  check_imported(trace, input_name);
  return trace;
}

void write_interval_csv(const Trace& trace, std::ostream& out) {
  std::vector<Lifetime> lifetimes = compute_lifetimes(trace);
  out << "id,lower,upper,size\n";
  for (const Lifetime& l : lifetimes) out << l.id << ',' << l.start << ',' << l.end << ',' << l.size << '\n';
}

}  // namespace stalloc
