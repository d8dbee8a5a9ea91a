#include "sim/pytorch_alloc_conf.h"

#include <bit>
#include <charconv>
#include <string>
#include <vector>

#include "common/error.h"

namespace stalloc {

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kLargeBufferMiB = 20;

[[noreturn]] void fail(const std::string& what) {
  throw UsageError("PYTORCH_CUDA_ALLOC_CONF: " + what);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::uint64_t parse_uint(std::string_view key, std::string_view text) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size()) {
    fail(std::string(key) + ": expected a non-negative integer, got '" + std::string(text) + "'");
  }
  return v;
}

bool parse_bool(std::string_view key, std::string_view text) {
  if (text == "True" || text == "true") return true;
  if (text == "False" || text == "false") return false;
  fail(std::string(key) + ": expected True or False, got '" + std::string(text) + "'");
}

// Splits "a:1,b:[x:1,y:2],c:3" at the commas that are not inside brackets.
std::vector<std::string_view> split_options(std::string_view text) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      std::string_view item = trim(text.substr(start, i - start));
      if (!item.empty()) out.push_back(item);
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      if (--depth < 0) fail("unbalanced ']' in '" + std::string(text) + "'");
    }
  }
  if (depth != 0) fail("unbalanced '[' in '" + std::string(text) + "'");
  return out;
}

std::uint64_t parse_divisions(std::string_view text) {
  std::uint64_t v = parse_uint("roundup_power2_divisions", text);
  if (v != 0 && !std::has_single_bit(v)) {
    fail("roundup_power2_divisions: divisions must be a power of 2 (or 0), got " + std::string(text));
  }
  return v;
}

// "N" applies to every interval. "[K:N,...,>:N]": K (MiB, a power of 2) sets the interval
// [K, 2K) MiB, the first entry also every smaller one, and ">" every interval from the last K on
// (PyTorch's CUDAAllocatorConfig reads the list this way).
void parse_roundup(std::string_view value, PytorchAllocConf* conf) {
  auto& div = conf->roundup_power2_divisions;
  if (value.empty() || value.front() != '[') {
    div.fill(parse_divisions(value));
    return;
  }
  if (value.back() != ']') fail("roundup_power2_divisions: expected ']' at the end of '" + std::string(value) + "'");
  std::string_view body = value.substr(1, value.size() - 2);
  std::size_t last_index = 0;
  bool first = true;
  for (std::string_view entry : split_options(body)) {
    auto colon = entry.find(':');
    if (colon == std::string_view::npos) {
      fail("roundup_power2_divisions: expected SIZE_MB:DIVISIONS, got '" + std::string(entry) + "'");
    }
    std::string_view interval = trim(entry.substr(0, colon));
    std::uint64_t divisions = parse_divisions(trim(entry.substr(colon + 1)));
    if (interval == ">") {
      std::fill(div.begin() + static_cast<std::ptrdiff_t>(last_index), div.end(), divisions);
      first = false;
      continue;
    }
    std::uint64_t mb = parse_uint("roundup_power2_divisions interval", interval);
    if (!std::has_single_bit(mb)) {
      fail("roundup_power2_divisions: interval sizes must be powers of 2 MiB, got " + std::string(interval));
    }
    std::size_t index = std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(mb) - 1), div.size() - 1);
    if (first) std::fill(div.begin(), div.begin() + static_cast<std::ptrdiff_t>(index), divisions);
    div[index] = divisions;
    last_index = index;
    first = false;
  }
}

}  // namespace

PytorchAllocConf parse_pytorch_alloc_conf(std::string_view text) {
  PytorchAllocConf conf;
  for (std::string_view option : split_options(text)) {
    auto colon = option.find(':');
    if (colon == std::string_view::npos) {
      fail("expected KEY:VALUE, got '" + std::string(option) + "'");
    }
    std::string_view key = trim(option.substr(0, colon));
    std::string_view value = trim(option.substr(colon + 1));
    if (key == "max_split_size_mb") {
      std::uint64_t mb = parse_uint(key, value);
      if (mb <= kLargeBufferMiB) {
        fail("max_split_size_mb too small, must be > " + std::to_string(kLargeBufferMiB) + ", got " + std::string(value));
      }
      conf.max_split_size = mb > (std::numeric_limits<std::uint64_t>::max() / kMiB) ? std::numeric_limits<std::uint64_t>::max()
                                                                                      : mb * kMiB;
    } else if (key == "garbage_collection_threshold") {
      double v = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (value.empty() || ec != std::errc() || p != value.data() + value.size() || !(v > 0.0 && v < 1.0)) {
        fail("garbage_collection_threshold: expected a number in (0, 1), got '" + std::string(value) + "'");
      }
      conf.garbage_collection_threshold = v;
    } else if (key == "roundup_power2_divisions") {
      parse_roundup(value, &conf);
    } else if (key == "expandable_segments") {
      conf.expandable_segments = parse_bool(key, value);
    } else if (key == "backend") {
      if (value != "native") fail("backend: only 'native' (the caching allocator) is modelled, got '" + std::string(value) + "'");
    } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
               key == "pinned_use_background_threads") {
      parse_bool(key, value);  // host-side options: valid, no effect on device memory
    } else if (key == "pinned_num_register_threads") {
      parse_uint(key, value);
    } else {
      fail("unknown option '" + std::string(key) +
           "' (known: max_split_size_mb, garbage_collection_threshold, roundup_power2_divisions, "
           "expandable_segments, backend, release_lock_on_cudamalloc, pinned_use_cuda_host_register, "
           "pinned_num_register_threads, pinned_use_background_threads)");
    }
  }
  return conf;
}

std::uint64_t roundup_divisions_for(const PytorchAllocConf& conf, std::uint64_t size) {
  if (size == 0) return 0;
  const std::size_t log_size = static_cast<std::size_t>(std::bit_width(size) - 1);
  const std::size_t first = 20;  // the intervals start at 1 MiB
  std::size_t index = log_size > first ? log_size - first : 0;
  index = std::min(index, PytorchAllocConf::kRoundupIntervals - 1);
  return conf.roundup_power2_divisions[index];
}

}  // namespace stalloc
