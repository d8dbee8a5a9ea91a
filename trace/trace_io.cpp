// Trace files, text and binary (layouts in docs/formats.md).
//
// Both readers work on the whole file in memory: traces reach millions of requests, and a
// token-at-a-time istream costs ~10x what std::from_chars over a buffer does. Every size taken
// from a binary file is checked against the bytes actually present before anything is
// allocated, so a corrupt or hostile file can make the reader fail but never over-allocate.
#include "trace/trace_io.h"

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <istream>
#include <limits>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <system_error>
#include <type_traits>

#include "common/error.h"
#include "trace/import_pytorch.h"

namespace stalloc {

namespace {

constexpr int kTextVersion = 1;
constexpr std::uint32_t kBinaryVersion = 1;
constexpr std::size_t kRecordBytes = 48;
constexpr std::uint8_t kFlagDynamic = 1;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string quoted(std::string_view token) {
  constexpr std::size_t kMaxShown = 40;
  std::string r = "'";
  for (char c : token.substr(0, kMaxShown)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(u));
      r += buf;
    } else {
      r += c;
    }
  }
  if (token.size() > kMaxShown) r += "...";
  return r + "'";
}

// ---- text ---------------------------------------------------------------------------------

// Meta keys are single tokens and values run to the end of the line, so a key escapes space
// and both escape what would end or blur a line.
std::string escape_meta(std::string_view s, bool is_key) {
  std::string r;
  r.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '\\': r += "\\\\"; break;
      case '\n': r += "\\n"; break;
      case '\r': r += "\\r"; break;
      case '\t': r += "\\t"; break;
      case ' ':
        if (is_key) {
          r += "\\s";
        } else {
          r += ' ';
        }
        break;
      default: r += c;
    }
  }
  return r;
}

bool unescape_meta(std::string_view s, std::string* out) {
  out->clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      *out += s[i];
      continue;
    }
    if (++i == s.size()) return false;
    switch (s[i]) {
      case '\\': *out += '\\'; break;
      case 'n': *out += '\n'; break;
      case 'r': *out += '\r'; break;
      case 't': *out += '\t'; break;
      case 's': *out += ' '; break;
      default: return false;
    }
  }
  return true;
}

bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

// One line of a text trace, consumed token by token.
class LineCursor {
 public:
  LineCursor(std::string_view line, const std::string& file, std::size_t line_no)
      : line_(line), file_(file), line_no_(line_no) {}

  bool at_end() {
    skip_blanks();
    return pos_ == line_.size();
  }

  std::string_view token(const char* what) {
    skip_blanks();
    if (pos_ == line_.size()) fail(std::string("expected ") + what + ", got end of line");
    std::size_t start = pos_;
    while (pos_ < line_.size() && !is_blank(line_[pos_])) ++pos_;
    return line_.substr(start, pos_ - start);
  }

  template <typename T>
  T number(const char* what) {
    std::string_view t = token(what);
    T v{};
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size()) {
      const char* kind = std::is_signed_v<T> ? "integer" : "unsigned integer";
      fail(std::string("expected ") + what + " (" + kind + (ec == std::errc::result_out_of_range ? " in range" : "") +
           "), got " + quoted(t));
    }
    return v;
  }

  // The rest of the line after exactly one separator (meta values keep inner spaces).
  std::string_view rest() {
    if (pos_ < line_.size() && is_blank(line_[pos_])) ++pos_;
    std::string_view r = line_.substr(pos_);
    pos_ = line_.size();
    return r;
  }

  void expect_end() {
    if (!at_end()) fail("expected end of line, got " + quoted(token("")));
  }

  [[noreturn]] void fail(const std::string& what) const { throw ParseError(file_, line_no_, what); }

 private:
  void skip_blanks() {
    while (pos_ < line_.size() && is_blank(line_[pos_])) ++pos_;
  }

  std::string_view line_;
  const std::string& file_;
  std::size_t line_no_;
  std::size_t pos_ = 0;
};

Event parse_event(LineCursor& c, EventKind kind) {
  Event e;
  e.kind = kind;
  e.id = c.number<std::uint64_t>("ID");
  e.size = c.number<std::uint64_t>("SIZE");
  e.stream = c.number<std::uint32_t>("STREAM");
  e.iteration = c.number<std::uint32_t>("ITER");
  std::string_view phase = c.token("PHASE");
  if (!parse_phase(phase, &e.phase)) {
    c.fail("expected PHASE (unknown, fwd, bwd, opt or other), got " + quoted(phase));
  }
  e.microbatch = c.number<std::int32_t>("MB");
  e.layer = c.number<std::int32_t>("LAYER");
  e.thread = c.number<std::uint16_t>("THREAD");
  std::string_view flags = c.token("FLAGS");
  if (flags == "d") {
    e.dynamic = true;
  } else if (flags != "-") {
    c.fail("expected FLAGS ('-' or 'd'), got " + quoted(flags));
  }
  if (!c.at_end()) e.time_ns = c.number<std::int64_t>("TIME_NS");
  c.expect_end();
  return e;
}

Trace parse_text(std::string_view data, const std::string& file) {
  Trace trace;
  // A line holds at least ~21 bytes, so this never reserves more than the input justifies.
  trace.events.reserve(data.size() / 24);
  std::size_t pos = 0;
  std::size_t line_no = 0;
  bool seen_header = false;
  bool seen_device = false;
  std::string key, value;
  while (pos < data.size()) {
    ++line_no;
    const void* nl = std::memchr(data.data() + pos, '\n', data.size() - pos);
    std::size_t end = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - data.data()) : data.size();
    std::string_view line = data.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    LineCursor c(line, file, line_no);
    if (!seen_header) {
      std::string_view magic = c.token("'stalloc-trace 1' header");
      if (magic != kTextTraceHeader) c.fail("expected 'stalloc-trace 1' header, got " + quoted(magic));
      int version = c.number<int>("format version");
      if (version != kTextVersion) {
        c.fail("expected format version " + std::to_string(kTextVersion) + ", got " + std::to_string(version));
      }
      c.expect_end();
      seen_header = true;
      continue;
    }
    if (c.at_end()) continue;
    std::string_view word = c.token("a line");
    if (word[0] == '#') continue;
    if (word == "a" || word == "f") {
      trace.events.push_back(parse_event(c, word == "a" ? EventKind::Alloc : EventKind::Free));
      continue;
    }
    if (!trace.events.empty()) c.fail("expected event line ('a' or 'f'), got " + quoted(word));
    if (word == "device") {
      if (seen_device) c.fail("expected one 'device' line, got a second");
      trace.device = c.number<int>("device number");
      c.expect_end();
      seen_device = true;
    } else if (word == "meta") {
      std::string_view raw_key = c.token("meta KEY");
      if (!unescape_meta(raw_key, &key)) {
        c.fail("expected meta KEY with escapes \\\\ \\n \\r \\t \\s, got " + quoted(raw_key));
      }
      std::string_view raw_value = c.rest();
      if (!unescape_meta(raw_value, &value)) {
        c.fail("expected meta VALUE with escapes \\\\ \\n \\r \\t \\s, got " + quoted(raw_value));
      }
      if (!trace.meta.emplace(key, value).second) {
        c.fail("expected each meta key once, got " + quoted(raw_key) + " again");
      }
    } else {
      c.fail("expected 'device', 'meta', 'a' or 'f', got " + quoted(word));
    }
  }
  if (!seen_header) throw ParseError(file, 1, "expected 'stalloc-trace 1' header, got an empty file");
  return trace;
}

// Appends to a buffer that is handed to the stream in large blocks.
class BlockWriter {
 public:
  explicit BlockWriter(std::ostream& out) : out_(out) { buf_.reserve(kBlock + 256); }
  ~BlockWriter() = default;
  BlockWriter(const BlockWriter&) = delete;
  BlockWriter& operator=(const BlockWriter&) = delete;

  void put(std::string_view s) {
    buf_.append(s);
    maybe_flush();
  }
  void put(char ch) { buf_.push_back(ch); }
  template <typename T>
  void num(T v) {
    char tmp[24];
    auto [p, ec] = std::to_chars(tmp, tmp + sizeof tmp, v);
    (void)ec;  // 24 chars hold any 64-bit integer
    buf_.append(tmp, static_cast<std::size_t>(p - tmp));
  }
  void bytes(const void* p, std::size_t n) { buf_.append(static_cast<const char*>(p), n); }
  void maybe_flush() {
    if (buf_.size() >= kBlock) flush();
  }
  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  static constexpr std::size_t kBlock = 1 << 20;
  std::ostream& out_;
  std::string buf_;
};

void write_text(const Trace& trace, std::ostream& out) {
  BlockWriter w(out);
  w.put("stalloc-trace ");
  w.num(kTextVersion);
  w.put("\ndevice ");
  w.num(trace.device);
  w.put('\n');
  for (const auto& [k, v] : trace.meta) {
    if (k.empty()) throw UsageError("cannot write a trace with an empty meta key");
    w.put("meta ");
    w.put(escape_meta(k, true));
    w.put(' ');
    w.put(escape_meta(v, false));
    w.put('\n');
  }
  w.put("# kind id size stream iter phase mb layer thread flags [time_ns]\n");
  for (const Event& e : trace.events) {
    w.put(e.kind == EventKind::Alloc ? "a " : "f ");
    w.num(e.id);
    w.put(' ');
    w.num(e.size);
    w.put(' ');
    w.num(e.stream);
    w.put(' ');
    w.num(e.iteration);
    w.put(' ');
    w.put(phase_name(e.phase));
    w.put(' ');
    w.num(e.microbatch);
    w.put(' ');
    w.num(e.layer);
    w.put(' ');
    w.num(e.thread);
    w.put(e.dynamic ? " d" : " -");
    if (e.time_ns != -1) {
      w.put(' ');
      w.num(e.time_ns);
    }
    w.put('\n');
    w.maybe_flush();
  }
  w.flush();
}

// ---- binary -------------------------------------------------------------------------------

template <typename T>
T load_le(const unsigned char* p) {
  using U = std::make_unsigned_t<T>;
  U v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v = static_cast<U>(v | static_cast<U>(static_cast<U>(p[i]) << (8 * i)));
  return static_cast<T>(v);
}

template <typename T>
void store_le(unsigned char* p, T value) {
  using U = std::make_unsigned_t<T>;
  U v = static_cast<U>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

class BinaryReader {
 public:
  BinaryReader(std::string_view data, const std::string& file) : data_(data), file_(file) {}

  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v = load_le<T>(bytes() + pos_);
    pos_ += sizeof(T);
    return v;
  }

  std::string string(const char* what) {
    std::uint32_t n = get<std::uint32_t>(what);
    need(n, what);
    std::string s(data_.substr(pos_, n));
    pos_ += n;
    return s;
  }

  void need(std::size_t n, const char* what) const {
    if (data_.size() - pos_ < n) {
      fail(std::string("expected ") + what + " (" + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
           "), got end of file");
    }
  }

  std::size_t remaining() const { return data_.size() - pos_; }
  const unsigned char* bytes() const { return reinterpret_cast<const unsigned char*>(data_.data()); }
  std::size_t pos() const { return pos_; }
  void skip(std::size_t n) { pos_ += n; }

  [[noreturn]] void fail(const std::string& what, std::size_t record = 0) const {
    throw ParseError(file_, record, record == 0 ? "header: " + what : "record " + std::to_string(record) + ": " + what);
  }

 private:
  std::string_view data_;
  const std::string& file_;
  std::size_t pos_ = 0;
};

Trace parse_binary(std::string_view data, const std::string& file) {
  BinaryReader r(data, file);
  Trace trace;
  r.need(kBinaryTraceMagic.size(), "binary trace magic");
  r.skip(kBinaryTraceMagic.size());
  std::uint32_t version = r.get<std::uint32_t>("format version");
  if (version != kBinaryVersion) {
    r.fail("expected format version " + std::to_string(kBinaryVersion) + ", got " + std::to_string(version));
  }
  trace.device = r.get<std::int32_t>("device");
  std::uint32_t meta_count = r.get<std::uint32_t>("meta count");
  for (std::uint32_t i = 0; i < meta_count; ++i) {
    std::string key = r.string("meta key");
    if (key.empty()) r.fail("expected a non-empty meta key at entry " + std::to_string(i));
    std::string value = r.string("meta value");
    if (!trace.meta.emplace(std::move(key), std::move(value)).second) {
      r.fail("expected each meta key once, got a repeated key at entry " + std::to_string(i));
    }
  }
  std::uint64_t count = r.get<std::uint64_t>("event count");
  if (count > r.remaining() / kRecordBytes || count * kRecordBytes != r.remaining()) {
    r.fail("expected " + std::to_string(count) + " records of " + std::to_string(kRecordBytes) + " bytes, got " +
           std::to_string(r.remaining()) + " bytes");
  }
  trace.events.resize(count);
  const unsigned char* base = r.bytes() + r.pos();
  for (std::size_t i = 0; i < count; ++i) {
    const unsigned char* p = base + i * kRecordBytes;
    Event& e = trace.events[i];
    e.id = load_le<std::uint64_t>(p);
    e.size = load_le<std::uint64_t>(p + 8);
    e.time_ns = load_le<std::int64_t>(p + 16);
    e.stream = load_le<std::uint32_t>(p + 24);
    e.iteration = load_le<std::uint32_t>(p + 28);
    e.microbatch = load_le<std::int32_t>(p + 32);
    e.layer = load_le<std::int32_t>(p + 36);
    e.thread = load_le<std::uint16_t>(p + 40);
    std::uint8_t kind = p[42], phase = p[43], flags = p[44];
    if (kind > 1) r.fail("expected kind 0 (alloc) or 1 (free), got " + std::to_string(kind), i + 1);
    if (phase > static_cast<std::uint8_t>(Phase::Other)) {
      r.fail("expected phase 0..4, got " + std::to_string(phase), i + 1);
    }
    if ((flags & ~kFlagDynamic) != 0 || p[45] != 0 || p[46] != 0 || p[47] != 0) {
      r.fail("expected flags 0 or 1 and zero padding, got flags " + std::to_string(flags), i + 1);
    }
    e.kind = kind == 0 ? EventKind::Alloc : EventKind::Free;
    e.phase = static_cast<Phase>(phase);
    e.dynamic = (flags & kFlagDynamic) != 0;
  }
  return trace;
}

void write_binary(const Trace& trace, std::ostream& out) {
  BlockWriter w(out);
  auto put_u32 = [&](std::uint32_t v) {
    unsigned char b[4];
    store_le(b, v);
    w.bytes(b, 4);
  };
  auto put_string = [&](const std::string& s) {
    if (s.size() > std::numeric_limits<std::uint32_t>::max()) {
      throw UsageError("meta entry too long for a binary trace");
    }
    put_u32(static_cast<std::uint32_t>(s.size()));
    w.put(s);
  };
  w.put(kBinaryTraceMagic);
  put_u32(kBinaryVersion);
  put_u32(static_cast<std::uint32_t>(trace.device));
  put_u32(static_cast<std::uint32_t>(trace.meta.size()));
  for (const auto& [k, v] : trace.meta) {
    put_string(k);
    put_string(v);
  }
  unsigned char count[8];
  store_le<std::uint64_t>(count, trace.events.size());
  w.bytes(count, 8);
  for (const Event& e : trace.events) {
    std::array<unsigned char, kRecordBytes> rec{};
    store_le(rec.data(), e.id);
    store_le(rec.data() + 8, e.size);
    store_le(rec.data() + 16, e.time_ns);
    store_le(rec.data() + 24, e.stream);
    store_le(rec.data() + 28, e.iteration);
    store_le(rec.data() + 32, e.microbatch);
    store_le(rec.data() + 36, e.layer);
    store_le(rec.data() + 40, e.thread);
    rec[42] = e.kind == EventKind::Alloc ? 0 : 1;
    rec[43] = static_cast<std::uint8_t>(e.phase);
    rec[44] = e.dynamic ? kFlagDynamic : 0;
    w.bytes(rec.data(), rec.size());
    w.maybe_flush();
  }
  w.flush();
}

}  // namespace

TraceFormat trace_format_for(const std::string& path) {
  return ends_with(path, ".traceb") ? TraceFormat::Binary : TraceFormat::Text;
}

Trace parse_trace(std::string_view data, const std::string& name_for_errors) {
  if (data.substr(0, kBinaryTraceMagic.size()) == kBinaryTraceMagic) return parse_binary(data, name_for_errors);
  if (data.substr(0, kTextTraceHeader.size()) == kTextTraceHeader) return parse_text(data, name_for_errors);
  if (looks_like_pickle(data.substr(0, 2))) {
    throw ParseError(name_for_errors, 1,
                     "expected 'stalloc-trace 1' header or binary trace magic, got a pickle: a "
                     "PyTorch memory snapshot? Convert it with `stalloc import pytorch " +
                         name_for_errors + " -o OUT.trace` (`stalloc sim` reads it as it is)");
  }
  std::size_t first_line = std::min(data.find('\n'), data.size());
  throw ParseError(
      name_for_errors, 1,
      "expected 'stalloc-trace 1' header or binary trace magic, got " + quoted(data.substr(0, first_line)));
}

std::string read_file_bytes(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw ParseError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  std::string data;
  constexpr std::size_t kBlock = 1 << 20;
  for (;;) {
    std::size_t old = data.size();
    data.resize(old + kBlock);
    std::size_t n = std::fread(data.data() + old, 1, kBlock, f.get());
    data.resize(old + n);
    if (n < kBlock) break;
  }
  if (std::ferror(f.get())) throw ParseError(path, 0, "read error");
  return data;
}

Trace read_trace(const std::string& path) {
  return parse_trace(read_file_bytes(path), path);
}

Trace read_trace(std::istream& in, const std::string& name_for_errors) {
  std::string data;
  constexpr std::size_t kBlock = 1 << 20;
  while (in) {
    std::size_t old = data.size();
    data.resize(old + kBlock);
    in.read(data.data() + old, static_cast<std::streamsize>(kBlock));
    data.resize(old + static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw ParseError(name_for_errors, 0, "read error");
  return parse_trace(data, name_for_errors);
}

void write_trace(const Trace& trace, std::ostream& out, TraceFormat format) {
  if (format == TraceFormat::Binary) {
    write_binary(trace, out);
  } else {
    write_text(trace, out);
  }
}

void write_trace(const Trace& trace, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw UsageError("cannot open " + path + " for writing: " + std::strerror(errno));
  write_trace(trace, out, trace_format_for(path));
  out.flush();
  if (!out) throw UsageError("cannot write " + path + ": " + std::strerror(errno));
}

}  // namespace stalloc
