// A pickle reader for plain data only: dicts, lists, tuples, sets, str, bytes, int, float,
// bool and None (protocols 0 to 5). Any opcode that would name a global or build an object is
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
  enum class Kind : std::uint8_t { None, Bool, Int, Float, Str, Bytes, List, Tuple, Set, Dict };
  Kind kind = Kind::None;
  bool boolean = false;
  std::int64_t integer = 0;
  double real = 0;
  std::string text;                                                  // Str and Bytes
  std::vector<const PickleValue*> items;                             // List, Tuple, Set
  std::vector<std::pair<const PickleValue*, const PickleValue*>> entries;  // Dict, in insertion order

  bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }
  std::int64_t as_int() const { return kind == Kind::Bool ? boolean : integer; }
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
