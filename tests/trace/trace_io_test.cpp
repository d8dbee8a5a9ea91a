#include "trace/trace_io.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include "common/error.h"

namespace stalloc {
namespace {

// Random events that exercise every field, including extremes and time_ns == -1.
Trace random_trace(std::uint32_t seed, std::size_t n) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::uint64_t bound) { return rng() % bound; };
  Trace t;
  t.device = static_cast<int>(pick(8));
  t.meta["source"] = "test";
  t.meta["seed"] = std::to_string(seed);
  t.meta["odd key\twith\\escapes"] = "  value with spaces\nand a newline\r ";
  t.meta["empty"] = "";
  for (std::size_t i = 0; i < n; ++i) {
    Event e;
    e.kind = pick(2) ? EventKind::Alloc : EventKind::Free;
    e.id = pick(3) == 0 ? std::numeric_limits<std::uint64_t>::max() - pick(5) : pick(1000);
    e.size = pick(4) == 0 ? std::numeric_limits<std::uint64_t>::max() : rng() >> pick(64);
    e.stream = static_cast<std::uint32_t>(pick(3) == 0 ? std::numeric_limits<std::uint32_t>::max() : pick(4));
    e.iteration = static_cast<std::uint32_t>(pick(100));
    e.time_ns = pick(3) == 0 ? -1 : static_cast<std::int64_t>(rng()) >> pick(64);
    e.phase = static_cast<Phase>(pick(5));
    e.microbatch = pick(4) == 0 ? std::numeric_limits<std::int32_t>::min() : static_cast<std::int32_t>(pick(20)) - 1;
    e.layer = pick(4) == 0 ? std::numeric_limits<std::int32_t>::max() : static_cast<std::int32_t>(pick(80)) - 1;
    e.thread = static_cast<std::uint16_t>(pick(3) == 0 ? 65535 : pick(3));
    e.dynamic = pick(2) == 0;
    t.events.push_back(e);
  }
  return t;
}

std::string to_string(const Trace& t, TraceFormat f) {
  std::ostringstream out;
  write_trace(t, out, f);
  return out.str();
}

Trace from_string(const std::string& s) {
  std::istringstream in(s);
  return read_trace(in, "mem");
}

// The ParseError message for a text trace, or "" when it parses.
std::string text_error(const std::string& s) {
  try {
    parse_trace(s, "t.trace");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kHeader = "stalloc-trace 1\ndevice 0\n";

TEST(TraceIo, TextRoundTripRandomised) {
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    Trace t = random_trace(seed, 300);
    EXPECT_EQ(from_string(to_string(t, TraceFormat::Text)), t) << "seed " << seed;
  }
}

TEST(TraceIo, BinaryRoundTripRandomised) {
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    Trace t = random_trace(seed, 300);
    std::string bytes = to_string(t, TraceFormat::Binary);
    EXPECT_EQ(bytes.substr(0, kBinaryTraceMagic.size()), kBinaryTraceMagic);
    EXPECT_EQ(from_string(bytes), t) << "seed " << seed;
  }
}

TEST(TraceIo, EmptyTraceRoundTrips) {
  Trace t;
  EXPECT_EQ(from_string(to_string(t, TraceFormat::Text)), t);
  EXPECT_EQ(from_string(to_string(t, TraceFormat::Binary)), t);
}

TEST(TraceIo, TextLayoutIsStable) {
  Trace t;
  t.device = 3;
  t.meta["source"] = "unit test";
  Event a;
  a.id = 7;
  a.size = 4096;
  a.stream = 1;
  a.iteration = 2;
  a.phase = Phase::Backward;
  a.microbatch = 0;
  a.layer = 5;
  a.thread = 1;
  a.dynamic = true;
  a.time_ns = 123;
  Event f = a;
  f.kind = EventKind::Free;
  f.dynamic = false;
  f.time_ns = -1;
  t.events = {a, f};
  EXPECT_EQ(to_string(t, TraceFormat::Text),
            "stalloc-trace 1\ndevice 3\nmeta source unit test\n"
            "# kind id size stream iter phase mb layer thread flags [time_ns]\n"
            "a 7 4096 1 2 bwd 0 5 1 d 123\n"
            "f 7 4096 1 2 bwd 0 5 1 -\n");
}

TEST(TraceIo, TextAcceptsCommentsBlankLinesCrLfAndTabs) {
  Trace t = parse_trace(
      "stalloc-trace 1\r\n# comment\n\n  \ndevice\t2\nmeta k v\na 1 10 0 0 fwd -1 -1 0 -\r\n"
      "# between\nf\t1  10 0 0 fwd -1 -1 0 - 55",
      "t");
  EXPECT_EQ(t.device, 2);
  EXPECT_EQ(t.meta.at("k"), "v");
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[1].kind, EventKind::Free);
  EXPECT_EQ(t.events[1].time_ns, 55);
  EXPECT_EQ(t.events[0].time_ns, -1);
  EXPECT_EQ(t.events[0].microbatch, -1);
}

TEST(TraceIo, TextErrorsNameLineAndExpectation) {
  std::string h = kHeader;
  EXPECT_NE(text_error(h + "a 1 10 0 0 fwd -1 -1 0\n").find("t.trace:3: expected FLAGS"), std::string::npos);
  EXPECT_NE(text_error(h + "a 1 1x0 0 0 fwd -1 -1 0 -\n").find("t.trace:3: expected SIZE"), std::string::npos);
  EXPECT_NE(text_error(h + "a 1 10 0 0 fwd -1 -1 0 -\nx 1 10\n").find("t.trace:4: expected event line"),
            std::string::npos);
  EXPECT_NE(text_error(h + "q 1\n").find("expected 'device', 'meta', 'a' or 'f', got 'q'"), std::string::npos);
  EXPECT_NE(text_error(h + "a 1 10 0 0 sideways -1 -1 0 -\n").find("expected PHASE"), std::string::npos);
  EXPECT_NE(text_error(h + "a 1 10 0 0 fwd -1 -1 70000 -\n").find("expected THREAD"), std::string::npos);
  EXPECT_NE(text_error(h + "a 1 -10 0 0 fwd -1 -1 0 -\n").find("expected SIZE"), std::string::npos);
  EXPECT_NE(text_error(h + "a 1 10 0 0 fwd -1 -1 0 x\n").find("expected FLAGS"), std::string::npos);
  EXPECT_NE(text_error(h + "a 1 10 0 0 fwd -1 -1 0 - 5 6\n").find("expected end of line, got '6'"),
            std::string::npos);
  EXPECT_NE(text_error(h + "a 99999999999999999999 10 0 0 fwd -1 -1 0 -\n").find("in range"), std::string::npos);
  EXPECT_NE(text_error("stalloc-trace 2\n").find("expected format version 1, got 2"), std::string::npos);
  EXPECT_NE(text_error("hello\n").find("t.trace:1: expected 'stalloc-trace 1' header"), std::string::npos);
  EXPECT_NE(text_error("").find("t.trace:1:"), std::string::npos);
  EXPECT_NE(text_error(h + "device 1\n").find("second"), std::string::npos);
  EXPECT_NE(text_error(h + "meta a 1\nmeta a 2\n").find("meta key once"), std::string::npos);
  EXPECT_NE(text_error(h + "meta a \\q\n").find("escapes"), std::string::npos);
  EXPECT_NE(text_error(h + "meta\n").find("expected meta KEY"), std::string::npos);
}

TEST(TraceIo, ParseErrorCarriesLine) {
  try {
    parse_trace(std::string(kHeader) + "# c\na 1\n", "x");
    FAIL() << "no error";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.line(), 4u);
    EXPECT_EQ(e.file(), "x");
  }
}

// A free of an id that was never allocated is well-formed syntax: the reader keeps it and
// validate_trace reports it, so a file can be inspected even when its trace is inconsistent.
TEST(TraceIo, UnknownFreeParsesButFailsValidation) {
  Trace t = parse_trace(std::string(kHeader) + "f 9 10 0 0 fwd -1 -1 0 -\n", "t");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_NE(validate_trace(t).find("not live"), std::string::npos);
}

TEST(TraceIo, BinaryErrorsNameRecord) {
  Trace t = random_trace(5, 4);
  for (Event& e : t.events) e.phase = Phase::Forward;
  std::string bytes = to_string(t, TraceFormat::Binary);
  std::size_t records = bytes.size() - 4 * 48;
  // Record 3's kind byte.
  std::string bad = bytes;
  bad[records + 2 * 48 + 42] = 7;
  try {
    parse_trace(bad, "b.traceb");
    FAIL() << "no error";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.line(), 3u);
    EXPECT_NE(std::string(e.what()).find("record 3: expected kind"), std::string::npos);
  }
  bad = bytes;
  bad[records + 48 + 43] = 9;
  EXPECT_THROW(parse_trace(bad, "b"), ParseError);
  bad = bytes;
  bad[records + 47] = 1;
  EXPECT_THROW(parse_trace(bad, "b"), ParseError);
}

TEST(TraceIo, BinaryTruncationAtEveryLengthFailsCleanly) {
  Trace t = random_trace(9, 3);
  std::string bytes = to_string(t, TraceFormat::Binary);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(parse_trace(bytes.substr(0, n), "b"), ParseError) << n;
  }
}

TEST(TraceIo, BinaryHugeCountsDoNotAllocate) {
  std::string bytes(kBinaryTraceMagic);
  bytes += std::string("\x01\0\0\0", 4) + std::string(4, '\0');  // version 1, device 0
  std::string with_meta = bytes + std::string("\x01\0\0\0", 4) + std::string("\xff\xff\xff\xff", 4);
  EXPECT_THROW(parse_trace(with_meta, "b"), ParseError);
  std::string with_events = bytes + std::string(4, '\0') + std::string(8, '\xff');
  try {
    parse_trace(with_events, "b");
    FAIL() << "no error";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("header: expected"), std::string::npos);
  }
}

TEST(TraceIo, DetectsFormatByContentNotName) {
  Trace t = random_trace(3, 10);
  std::string dir = ::testing::TempDir();
  std::string text_named_b = dir + "/trace_io_test_text.traceb";
  {
    std::ofstream out(text_named_b, std::ios::binary);
    write_trace(t, out, TraceFormat::Text);
  }
  EXPECT_EQ(read_trace(text_named_b), t);
  std::string bin = dir + "/trace_io_test.traceb";
  write_trace(t, bin);
  EXPECT_EQ(trace_format_for(bin), TraceFormat::Binary);
  EXPECT_EQ(trace_format_for("x.trace"), TraceFormat::Text);
  EXPECT_EQ(read_trace(bin), t);
  std::remove(text_named_b.c_str());
  std::remove(bin.c_str());
}

TEST(TraceIo, MissingFileIsAClearError) {
  try {
    read_trace("/nonexistent/dir/x.trace");
    FAIL() << "no error";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.trace: cannot open"), std::string::npos);
  }
}

}  // namespace
}  // namespace stalloc
