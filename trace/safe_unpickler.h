// A pickle reader for plain data only: dicts, lists, tuples, sets, str, bytes, int (of any
// width), float, bool and None (protocols 0 to 5). Any opcode that would name a global or build an object is
// refused, so a PyTorch memory snapshot can be read without trusting whoever wrote it: nothing
// in the file is ever executed or looked up.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stalloc {

struct PickleValue {
  // Python ints are unbounded. One that fits int64 is an Int; a wider one (a frame's line
  // number of 2**64-1 has been seen in real snapshots) is a BigInt, which loads like any other
  // value so that only a reader that uses it has to decide whether its range is acceptable.
  enum class Kind : std::uint8_t { None, Bool, Int, BigInt, Float, Str, Bytes, List, Tuple, Set, Dict };
  Kind kind = Kind::None;
  bool boolean = false;
  std::int64_t integer = 0;  // Int; for a BigInt its sign saturated: INT64_MIN or INT64_MAX
  double real = 0;
  std::string text;  // Str and Bytes; a BigInt's decimal digits (with '-' when negative), or a
                     // placeholder "<integer of N bytes>" when it is too wide to spell out
  std::vector<const PickleValue*> items;                                   // List, Tuple, Set
  std::vector<std::pair<const PickleValue*, const PickleValue*>> entries;  // Dict, in insertion order

  // An int that fits int64 (bool included, as in Python).
  bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }
  // Any int: Int, Bool or BigInt.
  bool is_integer() const { return is_int() || kind == Kind::BigInt; }
  std::int64_t as_int() const { return kind == Kind::Bool ? boolean : integer; }
  // The value as uint64 when it is an integer in [0, 2**64); false otherwise.
  bool to_uint64(std::uint64_t* out) const;
  // The value in decimal, for messages: "-3", "18446744073709551615"; "" when not an integer.
  std::string decimal() const;
  bool is_str() const { return kind == Kind::Str; }
  bool is_sequence() const { return kind == Kind::List || kind == Kind::Tuple; }
  // The value of a Dict entry whose key is the str `key` (the last one set), or nullptr.
  const PickleValue* find(std::string_view key) const;
};

// Owns every value of one unpickled file. Values refer to each other by pointer (the memo can
// make a value appear twice, even inside itself), so they live in one arena, not in a tree.
class PickleDocument {
 public:
  const PickleValue& root() const { return *root_; }

 private:
  friend class Unpickler;
  std::deque<PickleValue> arena_;
  const PickleValue* root_ = nullptr;
};

// Throws ParseError(name, 0, "byte offset N: ...") on malformed input, on an opcode this
// reader does not support, and - with the words "refusing to load untrusted pickle" - on any
// opcode that references a class or global.
PickleDocument unpickle(std::string_view data, const std::string& name_for_errors);

}  // namespace stalloc
