// What every importer shares: raw stream handles become small indices, and address-based
// alloc/free records become id-based events (an address is reused once it is freed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trace/trace.h"

namespace stalloc {

// Raw stream values (CUDA stream handles, RMM stream pointers) to indices in first-seen order;
// raw 0, the default stream, is always index 0.
class StreamIndexer {
 public:
  std::uint32_t index(std::uint64_t raw);
  std::uint32_t count() const { return next_; }

 private:
  std::unordered_map<std::uint64_t, std::uint32_t> indices_;
  std::uint32_t next_ = 1;
};

// Appends events to a trace, giving allocations ids 1, 2, ... and remembering which id is live
// at each address.
class AddressTracker {
 public:
  explicit AddressTracker(Trace* trace) : trace_(trace) {}

  // Appends `e` as an Alloc with a fresh id; false (nothing appended) when addr is already live.
  bool alloc(std::uint64_t addr, Event e);
  // Appends `e` as the Free of the tensor live at addr, with its id, size and stream (a block is
  // freed on its allocation's stream; uses on others are record_stream); false (nothing
  // appended) when nothing is live there.
  bool free(std::uint64_t addr, Event e);
  std::size_t live() const { return live_.size(); }

 private:
  struct Live {
    std::uint64_t id;
    std::uint64_t size;
    std::uint32_t stream;
  };
  // A time stamp before the one appended last is kept as unknown (-1): clocks of several
  // threads or an edited file may go back, and the trace's time must not.
  void order_time(Event& e);
  Trace* trace_;
  std::int64_t last_time_ = -1;
  std::unordered_map<std::uint64_t, Live> live_;
  std::uint64_t next_id_ = 1;
};

// The last word on an importer's trace: it must be one validate_trace accepts (sizes and live
// bytes a device can hold, frees of what is live with its size and stream, time going forward).
// Throws ParseError naming the input and the first problem.
void check_imported(const Trace& trace, const std::string& input_name);

// The lines of a text file in memory, numbered from 1, without "\n" or a trailing "\r".
class LineReader {
 public:
  explicit LineReader(std::string_view data) : data_(data) {}
  bool next(std::string_view* line);
  std::size_t line_no() const { return line_no_; }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
  std::size_t line_no_ = 0;
};

// Fields of one CSV line split at commas, each trimmed of spaces (the imported formats never
// quote).
std::vector<std::string_view> split_csv(std::string_view line);

// The index of each wanted column in a CSV header line; throws ParseError(file, 1, ...)
// naming the first missing one. Extra columns are allowed.
std::vector<std::size_t> find_columns(std::string_view header, const std::vector<std::string_view>& wanted,
                                      const std::string& file);

// "dir/run.log" -> "run.log": what importers record as meta input.
std::string file_basename(const std::string& path);

// "0x1f00" -> 7936, "1024" -> 1024; false on anything else or overflow.
bool parse_address(std::string_view text, std::uint64_t* out);

}  // namespace stalloc
