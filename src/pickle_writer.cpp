#include "src/pickle_writer.h"

namespace stalloc {
namespace {

// Opcodes of pickle protocol 2 (Lib/pickletools.py).
constexpr char kProto = '\x80';
constexpr char kEmptyDict = '}';
constexpr char kEmptyList = ']';
constexpr char kMark = '(';
constexpr char kSetItems = 'u';
constexpr char kAppends = 'e';
constexpr char kBinUnicode = 'X';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt = 'J';
constexpr char kLong1 = '\x8a';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kNone = 'N';
constexpr char kStop = '.';

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(kProto);
  out_.push_back('\x02');
}

// An empty container, then MARK: the items follow and SETITEMS/APPENDS adds them. An empty
// MARK...SETITEMS is valid, so no special case for empty containers.
PickleWriter& PickleWriter::begin_dict() {
  out_.push_back(kEmptyDict);
  out_.push_back(kMark);
  return *this;
}

PickleWriter& PickleWriter::end_dict() {
  out_.push_back(kSetItems);
  return *this;
}

PickleWriter& PickleWriter::begin_list() {
  out_.push_back(kEmptyList);
  out_.push_back(kMark);
  return *this;
}

PickleWriter& PickleWriter::end_list() {
  out_.push_back(kAppends);
  return *this;
}

PickleWriter& PickleWriter::str(std::string_view s) {
  out_.push_back(kBinUnicode);
  put_le(out_, s.size(), 4);
  out_.append(s);
  return *this;
}

PickleWriter& PickleWriter::integer(std::int64_t v) {
  if (v >= 0 && v < 256) {
    out_.push_back(kBinInt1);
    out_.push_back(static_cast<char>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.push_back(kBinInt);
    put_le(out_, static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
  } else {
    // LONG1: little-endian two's complement, as few bytes as keep the sign.
    auto u = static_cast<std::uint64_t>(v);
    int bytes = 8;
    while (bytes > 1) {
      std::uint64_t top = (u >> (8 * (bytes - 1))) & 0xff;
      std::uint64_t next_sign = (u >> (8 * (bytes - 1) - 1)) & 1;
      if ((top == 0 && next_sign == 0) || (top == 0xff && next_sign == 1)) {
        --bytes;
      } else {
        break;
      }
    }
    out_.push_back(kLong1);
    out_.push_back(static_cast<char>(bytes));
    put_le(out_, u, bytes);
  }
  return *this;
}

PickleWriter& PickleWriter::boolean(bool v) {
  out_.push_back(v ? kNewTrue : kNewFalse);
  return *this;
}

PickleWriter& PickleWriter::none() {
  out_.push_back(kNone);
  return *this;
}

const std::string& PickleWriter::finish() {
  if (!finished_) {
    out_.push_back(kStop);
    finished_ = true;
  }
  return out_;
}

}  // namespace stalloc
