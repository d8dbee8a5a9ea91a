// The pickle virtual machine, restricted to building plain data.
//
// Python's own unpickler resolves GLOBAL/STACK_GLOBAL to any importable callable and REDUCE
// calls it, which is how a pickle runs code. Here those opcodes (and every other one that
// builds an object) stop the load with an error before anything is looked up. The machine is a
// loop over opcodes with an explicit stack, so deep nesting cannot overflow the C++ stack, and
// every length in the file is checked against the bytes left before it is used.
#include "trace/safe_unpickler.h"

#include <bit>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "common/error.h"

namespace stalloc {

const PickleValue* PickleValue::find(std::string_view key) const {
  if (kind != Kind::Dict) return nullptr;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->first->kind == Kind::Str && it->first->text == key) return it->second;
  }
  return nullptr;
}

bool PickleValue::to_uint64(std::uint64_t* out) const {
  if (is_int()) {
    if (as_int() < 0) return false;
    *out = static_cast<std::uint64_t>(as_int());
    return true;
  }
  if (kind != Kind::BigInt) return false;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size();
}

std::string PickleValue::decimal() const {
  if (is_int()) return std::to_string(as_int());
  return kind == Kind::BigInt ? text : std::string();
}

namespace {

// Python's pickle opcodes, named as in pickletools.
namespace op {
constexpr unsigned char MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F', INT = 'I',
                        BININT = 'J', BININT1 = 'K', LONG = 'L', BININT2 = 'M', NONE = 'N', PERSID = 'P',
                        BINPERSID = 'Q', REDUCE = 'R', STRING = 'S', BINSTRING = 'T', SHORT_BINSTRING = 'U',
                        UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', DICT = 'd',
                        EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h', INST = 'i', LONG_BINGET = 'j',
                        LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q', LONG_BINPUT = 'r',
                        SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G', PROTO = 0x80,
                        NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85, TUPLE2 = 0x86,
                        TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b, BINBYTES = 'B',
                        SHORT_BINBYTES = 'C', SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e,
                        EMPTY_SET = 0x8f, ADDITEMS = 0x90, FROZENSET = 0x91, NEWOBJ_EX = 0x92, STACK_GLOBAL = 0x93,
                        MEMOIZE = 0x94, FRAME = 0x95, BYTEARRAY8 = 0x96, NEXT_BUFFER = 0x97, READONLY_BUFFER = 0x98;
}  // namespace op

constexpr int kHighestProtocol = 5;
// Each opcode creates at most one value; this caps memory at a few GiB for a hostile file
// while leaving room for snapshots with hundreds of thousands of trace entries.
constexpr std::size_t kMaxValues = std::size_t{1} << 24;
// A BigInt wider than this keeps a placeholder instead of its digits (the conversion is
// quadratic in the width, and no snapshot field needs such a number).
constexpr std::size_t kMaxBigIntBytes = 64;

}  // namespace

class Unpickler {
 public:
  Unpickler(std::string_view data, const std::string& name) : data_(data), name_(name) {}

  PickleDocument run() {
    for (;;) {
      op_pos_ = pos_;
      unsigned char code = u8("an opcode");
      if (code == op::STOP) {
        PickleValue* result = pop("STOP");
        if (!marks_.empty() || !stack_.empty()) fail("expected an empty stack at STOP");
        doc_.root_ = result;
        return std::move(doc_);
      }
      step(code);
    }
  }

 private:
  void step(unsigned char code) {
    switch (code) {
      case op::PROTO: {
        unsigned char v = u8("protocol number");
        if (v > kHighestProtocol) fail("expected pickle protocol 0 to 5, got " + std::to_string(v));
        return;
      }
      case op::FRAME: u64("frame length"); return;  // a read-ahead hint: the opcodes follow inline
      case op::MARK: marks_.push_back(stack_.size()); return;
      case op::POP:
        if (available() > 0) {
          stack_.pop_back();
        } else {
          pop_mark("POP");
        }
        return;
      case op::POP_MARK: pop_mark("POP_MARK"); return;
      case op::DUP: push(top("DUP")); return;
      case op::NONE: push(make(PickleValue::Kind::None)); return;
      case op::NEWTRUE: push(boolean(true)); return;
      case op::NEWFALSE: push(boolean(false)); return;
      case op::BININT1: push(integer(u8("BININT1 value"))); return;
      case op::BININT2: push(integer(load<std::uint16_t>("BININT2 value"))); return;
      case op::BININT: push(integer(static_cast<std::int32_t>(load<std::uint32_t>("BININT value")))); return;
      case op::LONG1: push(long_bytes(u8("LONG1 length"))); return;
      case op::LONG4: {
        auto n = static_cast<std::int32_t>(load<std::uint32_t>("LONG4 length"));
        if (n < 0) fail("expected a non-negative LONG4 length");
        push(long_bytes(static_cast<std::size_t>(n)));
        return;
      }
      case op::INT: text_int(line("INT value")); return;
      case op::LONG: {
        std::string_view t = line("LONG value");
        if (!t.empty() && t.back() == 'L') t.remove_suffix(1);
        push(decimal_int(t, "LONG value"));
        return;
      }
      case op::FLOAT: push(real(parse_real(line("FLOAT value")))); return;
      case op::BINFLOAT: {
        std::uint64_t bits = 0;
        for (unsigned char b : bytes(8, "BINFLOAT value")) bits = (bits << 8) | b;  // big-endian
        push(real(std::bit_cast<double>(bits)));
        return;
      }
      case op::SHORT_BINSTRING: push(str(PickleValue::Kind::Str, bytes(u8("length"), "SHORT_BINSTRING"))); return;
      case op::BINSTRING: {
        auto n = static_cast<std::int32_t>(load<std::uint32_t>("BINSTRING length"));
        if (n < 0) fail("expected a non-negative BINSTRING length");
        push(str(PickleValue::Kind::Str, bytes(static_cast<std::size_t>(n), "BINSTRING")));
        return;
      }
      case op::SHORT_BINUNICODE: push(str(PickleValue::Kind::Str, bytes(u8("length"), "SHORT_BINUNICODE"))); return;
      case op::BINUNICODE: push(str(PickleValue::Kind::Str, sized<std::uint32_t>("BINUNICODE"))); return;
      case op::BINUNICODE8: push(str(PickleValue::Kind::Str, sized<std::uint64_t>("BINUNICODE8"))); return;
      case op::SHORT_BINBYTES: push(str(PickleValue::Kind::Bytes, bytes(u8("length"), "SHORT_BINBYTES"))); return;
      case op::BINBYTES: push(str(PickleValue::Kind::Bytes, sized<std::uint32_t>("BINBYTES"))); return;
      case op::BINBYTES8: push(str(PickleValue::Kind::Bytes, sized<std::uint64_t>("BINBYTES8"))); return;
      case op::BYTEARRAY8: push(str(PickleValue::Kind::Bytes, sized<std::uint64_t>("BYTEARRAY8"))); return;
      case op::STRING: push(str(PickleValue::Kind::Str, quoted_string(line("STRING value")))); return;
      case op::UNICODE: {
        std::string_view t = line("UNICODE value");
        if (t.find('\\') != std::string_view::npos) unsupported("UNICODE with escapes");
        push(str(PickleValue::Kind::Str, t));
        return;
      }
      case op::EMPTY_LIST: push(make(PickleValue::Kind::List)); return;
      case op::EMPTY_TUPLE: push(make(PickleValue::Kind::Tuple)); return;
      case op::EMPTY_DICT: push(make(PickleValue::Kind::Dict)); return;
      case op::EMPTY_SET: push(make(PickleValue::Kind::Set)); return;
      case op::LIST: push(collect(PickleValue::Kind::List, "LIST")); return;
      case op::TUPLE: push(collect(PickleValue::Kind::Tuple, "TUPLE")); return;
      case op::FROZENSET: push(collect(PickleValue::Kind::Set, "FROZENSET")); return;
      case op::TUPLE1:
      case op::TUPLE2:
      case op::TUPLE3: {
        std::size_t n = static_cast<std::size_t>(code - op::TUPLE1) + 1;
        if (available() < n) {
          fail("expected " + std::to_string(n) + " values on the stack for TUPLE" + std::to_string(n));
        }
        PickleValue* t = make(PickleValue::Kind::Tuple);
        t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        push(t);
        return;
      }
      case op::DICT: {
        std::size_t mark = pop_mark("DICT");
        PickleValue* d = make(PickleValue::Kind::Dict);
        set_items(d, mark, "DICT");
        push(d);
        return;
      }
      case op::APPEND: {
        PickleValue* v = pop("APPEND");
        container(PickleValue::Kind::List, "APPEND")->items.push_back(v);
        return;
      }
      case op::APPENDS:
      case op::ADDITEMS: {
        const char* what = code == op::APPENDS ? "APPENDS" : "ADDITEMS";
        std::size_t mark = pop_mark(what);
        if (mark <= frame_base()) fail(std::string("expected a container below the mark for ") + what);
        PickleValue* c = stack_[mark - 1];
        auto want = code == op::APPENDS ? PickleValue::Kind::List : PickleValue::Kind::Set;
        if (c->kind != want) fail(std::string("expected a ") + (code == op::APPENDS ? "list" : "set") + " for " + what);
        c->items.insert(c->items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
        stack_.resize(mark);
        return;
      }
      case op::SETITEM: {
        PickleValue* v = pop("SETITEM");
        PickleValue* k = pop("SETITEM");
        container(PickleValue::Kind::Dict, "SETITEM")->entries.emplace_back(k, v);
        return;
      }
      case op::SETITEMS: {
        std::size_t mark = pop_mark("SETITEMS");
        if (mark <= frame_base()) fail("expected a dict below the mark for SETITEMS");
        PickleValue* d = stack_[mark - 1];
        if (d->kind != PickleValue::Kind::Dict) fail("expected a dict for SETITEMS");
        set_items(d, mark, "SETITEMS");
        return;
      }
      case op::PUT: memo_[parse_index(line("PUT index"))] = top("PUT"); return;
      case op::BINPUT: memo_[u8("BINPUT index")] = top("BINPUT"); return;
      case op::LONG_BINPUT: memo_[load<std::uint32_t>("LONG_BINPUT index")] = top("LONG_BINPUT"); return;
      case op::MEMOIZE: memo_[memo_.size()] = top("MEMOIZE"); return;
      case op::GET: push(memo(parse_index(line("GET index")))); return;
      case op::BINGET: push(memo(u8("BINGET index"))); return;
      case op::LONG_BINGET: push(memo(load<std::uint32_t>("LONG_BINGET index"))); return;
      case op::GLOBAL: {
        std::string module(line("GLOBAL module"));
        std::string qualname(line("GLOBAL name"));
        refuse("GLOBAL " + module + "." + qualname);
      }
      case op::STACK_GLOBAL: {
        std::string what = "STACK_GLOBAL";
        if (available() >= 2 && stack_[stack_.size() - 2]->is_str() && stack_.back()->is_str()) {
          what += " " + stack_[stack_.size() - 2]->text + "." + stack_.back()->text;
        }
        refuse(what);
      }
      case op::REDUCE: refuse("REDUCE");
      case op::BUILD: refuse("BUILD");
      case op::INST: refuse("INST");
      case op::OBJ: refuse("OBJ");
      case op::NEWOBJ: refuse("NEWOBJ");
      case op::NEWOBJ_EX: refuse("NEWOBJ_EX");
      case op::PERSID: refuse("PERSID");
      case op::BINPERSID: refuse("BINPERSID");
      case op::EXT1: refuse("EXT1");
      case op::EXT2: refuse("EXT2");
      case op::EXT4: refuse("EXT4");
      case op::NEXT_BUFFER: unsupported("NEXT_BUFFER (out-of-band buffers)");
      case op::READONLY_BUFFER: unsupported("READONLY_BUFFER (out-of-band buffers)");
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(code));
        fail(std::string("expected a pickle opcode, got byte ") + hex);
      }
    }
  }

  // ---- values ----
  PickleValue* make(PickleValue::Kind kind) {
    if (doc_.arena_.size() >= kMaxValues) fail("pickle holds more than " + std::to_string(kMaxValues) + " values");
    PickleValue& v = doc_.arena_.emplace_back();
    v.kind = kind;
    return &v;
  }
  PickleValue* boolean(bool b) {
    PickleValue* v = make(PickleValue::Kind::Bool);
    v->boolean = b;
    return v;
  }
  PickleValue* integer(std::int64_t i) {
    PickleValue* v = make(PickleValue::Kind::Int);
    v->integer = i;
    return v;
  }
  PickleValue* real(double d) {
    PickleValue* v = make(PickleValue::Kind::Float);
    v->real = d;
    return v;
  }
  PickleValue* str(PickleValue::Kind kind, std::string_view s) {
    PickleValue* v = make(kind);
    v->text.assign(s);
    return v;
  }

  // ---- stack ----
  // Values pushed before the innermost MARK are out of reach until that mark is consumed.
  std::size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
  std::size_t available() const { return stack_.size() - frame_base(); }
  void push(PickleValue* v) { stack_.push_back(v); }
  PickleValue* top(const char* what) {
    if (available() == 0) fail(std::string("expected a value on the stack for ") + what);
    return stack_.back();
  }
  PickleValue* pop(const char* what) {
    PickleValue* v = top(what);
    stack_.pop_back();
    return v;
  }
  std::size_t pop_mark(const char* what) {
    if (marks_.empty()) fail(std::string("expected a MARK before ") + what);
    std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  PickleValue* collect(PickleValue::Kind kind, const char* what) {
    std::size_t mark = pop_mark(what);
    PickleValue* c = make(kind);
    c->items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return c;
  }
  PickleValue* container(PickleValue::Kind kind, const char* what) {
    PickleValue* c = top(what);
    if (c->kind != kind) {
      fail(std::string("expected a ") + (kind == PickleValue::Kind::List ? "list" : "dict") + " for " + what);
    }
    return c;
  }
  void set_items(PickleValue* d, std::size_t mark, const char* what) {
    if ((stack_.size() - mark) % 2 != 0) fail(std::string("expected key/value pairs for ") + what);
    for (std::size_t i = mark; i < stack_.size(); i += 2) d->entries.emplace_back(stack_[i], stack_[i + 1]);
    stack_.resize(mark);
  }
  PickleValue* memo(std::uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("expected a memo entry " + std::to_string(index) + ", got none");
    return it->second;
  }

  // ---- input ----
  void need(std::uint64_t n, const char* what) const {
    if (n > data_.size() - pos_) {
      fail(std::string("expected ") + what + " (" + std::to_string(n) + " bytes), got end of data");
    }
  }
  unsigned char u8(const char* what) {
    need(1, what);
    return static_cast<unsigned char>(data_[pos_++]);
  }
  template <typename T>
  T load(const char* what) {
    need(sizeof(T), what);
    T v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      v = static_cast<T>(v | static_cast<T>(static_cast<T>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i)));
    }
    pos_ += sizeof(T);
    return v;
  }
  std::uint64_t u64(const char* what) { return load<std::uint64_t>(what); }
  std::string_view bytes(std::uint64_t n, const char* what) {
    need(n, what);
    std::string_view s = data_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  template <typename Length>
  std::string_view sized(const char* what) {
    return bytes(load<Length>(what), what);
  }
  std::string_view line(const char* what) {
    std::size_t nl = data_.find('\n', pos_);
    if (nl == std::string_view::npos) fail(std::string("expected ") + what + " ending in a newline, got end of data");
    std::string_view s = data_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return s;
  }

  // Python ints are unbounded: LONG1/LONG4 hold little-endian two's complement of any width.
  // One within int64 is an Int; a wider one a BigInt (safe_unpickler.h).
  PickleValue* long_bytes(std::size_t n) {
    std::string_view b = bytes(n, "LONG bytes");
    if (n == 0) return integer(0);
    const bool negative = (static_cast<unsigned char>(b[n - 1]) & 0x80) != 0;
    const unsigned char fill = negative ? 0xff : 0x00;
    // Drop the sign-extension bytes that do not change the value.
    std::size_t width = n;
    while (width > 1 && static_cast<unsigned char>(b[width - 1]) == fill &&
           ((static_cast<unsigned char>(b[width - 2]) & 0x80) != 0) == negative) {
      --width;
    }
    if (width <= 8) {
      std::uint64_t v = negative ? ~std::uint64_t{0} : 0;
      for (std::size_t i = 0; i < width; ++i) {
        v &= ~(std::uint64_t{0xff} << (8 * i));
        v |= std::uint64_t{static_cast<unsigned char>(b[i])} << (8 * i);
      }
      return integer(static_cast<std::int64_t>(v));
    }
    PickleValue* v = big_integer(negative);
    if (width > kMaxBigIntBytes) {
      v->text = "<integer of " + std::to_string(width) + " bytes>";
      return v;
    }
    // Magnitude, little-endian: the bytes themselves, or their two's complement negation.
    std::vector<std::uint8_t> mag(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(width));
    if (negative) {
      unsigned carry = 1;
      for (std::uint8_t& x : mag) {
        unsigned sum = static_cast<unsigned>(static_cast<std::uint8_t>(~x)) + carry;
        x = static_cast<std::uint8_t>(sum & 0xff);
        carry = sum >> 8;
      }
    }
    // Repeated division by 10 of the magnitude, most significant byte first.
    std::string digits;
    for (;;) {
      bool zero = true;
      unsigned rem = 0;
      for (std::size_t i = mag.size(); i-- > 0;) {
        unsigned cur = (rem << 8) | mag[i];
        mag[i] = static_cast<std::uint8_t>(cur / 10);
        rem = cur % 10;
        if (mag[i] != 0) zero = false;
      }
      digits.push_back(static_cast<char>('0' + rem));
      if (zero) break;
    }
    if (negative) digits.push_back('-');
    v->text.assign(digits.rbegin(), digits.rend());
    return v;
  }
  PickleValue* big_integer(bool negative) {
    PickleValue* v = make(PickleValue::Kind::BigInt);
    v->integer = negative ? std::numeric_limits<std::int64_t>::min() : std::numeric_limits<std::int64_t>::max();
    return v;
  }
  void text_int(std::string_view t) {
    if (t == "01") {
      push(boolean(true));
    } else if (t == "00") {
      push(boolean(false));
    } else {
      push(decimal_int(t, "INT value"));
    }
  }
  // A decimal of any width (protocol 0 and 1 INT and LONG): Int within int64, else BigInt.
  PickleValue* decimal_int(std::string_view t, const char* what) {
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (!t.empty() && ec == std::errc() && p == t.data() + t.size()) return integer(v);
    std::string_view digits = t;
    if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
    bool ok = !digits.empty();
    for (char c : digits) ok = ok && c >= '0' && c <= '9';
    if (!ok) fail(std::string("expected ") + what + " as a decimal integer");
    PickleValue* big = big_integer(t.front() == '-');
    while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
    if (digits.size() > 3 * kMaxBigIntBytes) {
      big->text = "<integer of " + std::to_string(digits.size()) + " digits>";
    } else {
      if (t.front() == '-') big->text.push_back('-');
      big->text.append(digits);
    }
    return big;
  }
  std::uint64_t parse_index(std::string_view t) {
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size()) fail("expected a decimal memo index");
    return v;
  }
  double parse_real(std::string_view t) {
    double d = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), d);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size()) fail("expected a decimal FLOAT value");
    return d;
  }
  std::string_view quoted_string(std::string_view t) {
    if (t.size() < 2 || (t.front() != '\'' && t.front() != '"') || t.back() != t.front()) {
      fail("expected a quoted STRING value");
    }
    t = t.substr(1, t.size() - 2);
    if (t.find('\\') != std::string_view::npos) unsupported("STRING with escapes");
    return t;
  }

  [[noreturn]] void refuse(const std::string& what) const {
    fail("pickle references a class or global (" + what + "): refusing to load untrusted pickle");
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    fail("unsupported pickle opcode " + what + " (only plain data is read)");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ParseError(name_, 0, "byte offset " + std::to_string(op_pos_) + ": " + what);
  }

  std::string_view data_;
  const std::string& name_;
  std::size_t pos_ = 0;
  std::size_t op_pos_ = 0;
  PickleDocument doc_;
  std::vector<PickleValue*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, PickleValue*> memo_;
};

PickleDocument unpickle(std::string_view data, const std::string& name_for_errors) {
  return Unpickler(data, name_for_errors).run();
}

}  // namespace stalloc
