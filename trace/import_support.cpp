#include "trace/import_support.h"

#include <charconv>

#include "common/error.h"

namespace stalloc {

std::uint32_t StreamIndexer::index(std::uint64_t raw) {
  if (raw == 0) return 0;
  auto [it, inserted] = indices_.emplace(raw, next_);
  if (inserted) ++next_;
  return it->second;
}

void AddressTracker::order_time(Event& e) {
  if (e.time_ns < 0) return;
  if (e.time_ns < last_time_) {
    e.time_ns = -1;
  } else {
    last_time_ = e.time_ns;
  }
}

bool AddressTracker::alloc(std::uint64_t addr, Event e) {
  e.kind = EventKind::Alloc;
  e.id = next_id_;
  if (!live_.emplace(addr, Live{e.id, e.size, e.stream}).second) return false;
  ++next_id_;
  order_time(e);
  trace_->events.push_back(e);
  return true;
}

void check_imported(const Trace& trace, const std::string& input_name) {
  if (std::string problem = validate_trace(trace); !problem.empty()) {
    throw ParseError(input_name, 0, "the input does not make a consistent trace: " + problem);
  }
}

bool AddressTracker::free(std::uint64_t addr, Event e) {
  auto it = live_.find(addr);
  if (it == live_.end()) return false;
  e.kind = EventKind::Free;
  e.id = it->second.id;
  e.size = it->second.size;
  e.stream = it->second.stream;
  live_.erase(it);
  order_time(e);
  trace_->events.push_back(e);
  return true;
}

bool LineReader::next(std::string_view* line) {
  if (pos_ >= data_.size()) return false;
  std::size_t end = data_.find('\n', pos_);
  if (end == std::string_view::npos) end = data_.size();
  *line = data_.substr(pos_, end - pos_);
  if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
  pos_ = end + 1;
  ++line_no_;
  return true;
}

std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  for (;;) {
    std::size_t comma = line.find(',', start);
    std::string_view f = line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!f.empty() && (f.front() == ' ' || f.front() == '\t')) f.remove_prefix(1);
    while (!f.empty() && (f.back() == ' ' || f.back() == '\t')) f.remove_suffix(1);
    fields.push_back(f);
    if (comma == std::string_view::npos) return fields;
    start = comma + 1;
  }
}

std::vector<std::size_t> find_columns(std::string_view header, const std::vector<std::string_view>& wanted,
                                      const std::string& file) {
  std::vector<std::string_view> names = split_csv(header);
  std::vector<std::size_t> out;
  for (std::string_view w : wanted) {
    std::size_t i = 0;
    while (i < names.size() && names[i] != w) ++i;
    if (i == names.size()) {
      std::string all;
      for (std::string_view x : wanted) {
        if (!all.empty()) all += ',';
        all += x;
      }
      throw ParseError(file, 1,
                       "expected a header with columns " + all + ", got '" + std::string(header.substr(0, 80)) +
                           "' (no '" + std::string(w) + "')");
    }
    out.push_back(i);
  }
  return out;
}

std::string file_basename(const std::string& path) {
  std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool parse_address(std::string_view text, std::uint64_t* out) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  if (text.empty()) return false;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, base);
  return ec == std::errc() && p == text.data() + text.size();
}

}  // namespace stalloc
