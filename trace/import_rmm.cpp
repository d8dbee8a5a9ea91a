// RMM log -> trace. RMM stamps rows with a wall-clock time of day (HH:MM:SS.ffffff), so
// time_ns is measured from the first row, and a time earlier than the previous row is taken to
// have crossed midnight. Threads become indices in first-seen order, like streams.
#include "trace/import_rmm.h"

#include <charconv>
#include <limits>
#include <unordered_map>

#include "common/error.h"
#include "trace/import_support.h"

namespace stalloc {

namespace {

constexpr std::int64_t kNsPerDay = 24LL * 3600 * 1000000000;

template <typename T>
bool parse_int(std::string_view s, T* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// "13:52:37.123456" -> nanoseconds since midnight.
bool parse_time_of_day(std::string_view s, std::int64_t* ns) {
  if (s.size() < 8 || s[2] != ':' || s[5] != ':') return false;
  int h = 0, m = 0, sec = 0;
  if (!parse_int(s.substr(0, 2), &h) || !parse_int(s.substr(3, 2), &m) || !parse_int(s.substr(6, 2), &sec)) {
    return false;
  }
  if (h > 23 || m > 59 || sec > 60) return false;
  std::int64_t frac = 0;
  std::string_view rest = s.substr(8);
  if (!rest.empty()) {
    if (rest.front() != '.' || rest.size() < 2 || rest.size() > 10) return false;
    rest.remove_prefix(1);
    if (!parse_int(rest, &frac) || frac < 0) return false;
    for (std::size_t digits = rest.size(); digits < 9; ++digits) frac *= 10;
  }
  *ns = ((h * 60LL + m) * 60 + sec) * 1000000000LL + frac;
  return true;
}

}  // namespace

Trace import_rmm_log(std::string_view csv, const std::string& input_name) {
  Trace trace;
  AddressTracker tracker(&trace);
  StreamIndexer streams;
  std::unordered_map<std::string_view, std::uint16_t> threads;
  LineReader lines(csv);
  std::string_view line;
  if (!lines.next(&line)) {
    throw ParseError(input_name, 1, "expected the RMM header Thread,Time,Action,Pointer,Size,Stream, got an empty file");
  }
  const std::vector<std::size_t> col =
      find_columns(line, {"Thread", "Time", "Action", "Pointer", "Size", "Stream"}, input_name);
  std::size_t needed = 0;
  for (std::size_t c : col) needed = std::max(needed, c + 1);
  enum { kThread, kTime, kAction, kPointer, kSize, kStream };
  std::uint64_t failures = 0, unknown_frees = 0;
  std::int64_t first = -1, previous = 0, day_offset = 0;
  while (lines.next(&line)) {
    auto fail = [&](const std::string& what) { throw ParseError(input_name, lines.line_no(), what); };
    if (line.empty()) continue;
    std::vector<std::string_view> f = split_csv(line);
    if (f.size() < needed) {
      fail("expected " + std::to_string(needed) + " comma-separated fields, got " + std::to_string(f.size()));
    }
    std::string_view action = f[col[kAction]];
    if (action == "allocate failure") {
      ++failures;
      continue;
    }
    if (action != "allocate" && action != "free") {
      fail("expected Action allocate, free or 'allocate failure', got '" + std::string(action) + "'");
    }
    std::int64_t tod = 0;
    if (!parse_time_of_day(f[col[kTime]], &tod)) {
      fail("expected Time as HH:MM:SS.ffffff, got '" + std::string(f[col[kTime]]) + "'");
    }
    if (first < 0) {
      first = tod;
    } else if (tod < previous) {
      day_offset += kNsPerDay;
    }
    previous = tod;
    std::uint64_t ptr = 0, size = 0, stream = 0;
    if (!parse_address(f[col[kPointer]], &ptr)) {
      fail("expected Pointer (0x hex or decimal), got '" + std::string(f[col[kPointer]]) + "'");
    }
    if (!parse_address(f[col[kSize]], &size)) {
      fail("expected Size (unsigned integer), got '" + std::string(f[col[kSize]]) + "'");
    }
    if (!parse_address(f[col[kStream]], &stream)) {
      fail("expected Stream (0x hex or decimal), got '" + std::string(f[col[kStream]]) + "'");
    }
    auto [it, inserted] = threads.emplace(f[col[kThread]], static_cast<std::uint16_t>(threads.size()));
    if (inserted && threads.size() > std::numeric_limits<std::uint16_t>::max()) fail("expected at most 65535 threads");
    Event e;
    e.size = size;
    e.stream = streams.index(stream);
    e.thread = it->second;
    e.time_ns = tod - first + day_offset;
    if (action == "allocate") {
      if (!tracker.alloc(ptr, e)) fail("allocate at " + std::string(f[col[kPointer]]) + " which is still live");
    } else if (!tracker.free(ptr, e)) {
      ++unknown_frees;
    }
  }
  trace.meta["source"] = "rmm";
  trace.meta["input"] = file_basename(input_name);
  if (failures) trace.meta["skipped_failures"] = std::to_string(failures);
  if (unknown_frees) trace.meta["skipped_unknown_frees"] = std::to_string(unknown_frees);
  check_imported(trace, input_name);
  return trace;
}

}  // namespace stalloc
