// A minimal pickle writer (protocol 2) for plain data: dicts, lists, str, int, bool, None.
// Enough for a PyTorch memory snapshot (torch.cuda.memory._snapshot() layout) that
// pytorch.org/memory_viz and pickle.load open. Containers are streamed: begin, items, end.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace stalloc {

class PickleWriter {
 public:
  PickleWriter();

  PickleWriter& begin_dict();   // then key, value, key, value, ...
  PickleWriter& end_dict();
  PickleWriter& begin_list();
  PickleWriter& end_list();
  PickleWriter& str(std::string_view s);
  PickleWriter& integer(std::int64_t v);
  PickleWriter& boolean(bool v);
  PickleWriter& none();

  template <typename T>
  PickleWriter& field(std::string_view key, const T& v) {
    str(key);
    return value(v);
  }
  PickleWriter& value(std::string_view v) { return str(v); }
  PickleWriter& value(const char* v) { return str(v); }
  PickleWriter& value(bool v) { return boolean(v); }
  PickleWriter& value(std::int64_t v) { return integer(v); }
  PickleWriter& value(std::uint64_t v) { return integer(static_cast<std::int64_t>(v)); }
  PickleWriter& value(int v) { return integer(v); }
  PickleWriter& value(unsigned v) { return integer(v); }

  // The finished pickle (appends STOP once).
  const std::string& finish();

 private:
  std::string out_;
  bool finished_ = false;
};

}  // namespace stalloc
