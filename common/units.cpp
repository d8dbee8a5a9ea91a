#include "common/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace stalloc {

std::optional<std::uint64_t> parse_u64(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string_view number = text.substr(0, i);
  std::string suffix;
  for (char c : text.substr(i)) suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::uint64_t mult = 0;
  if (suffix.empty() || suffix == "b") mult = 1;
  else if (suffix == "k" || suffix == "kb" || suffix == "kib") mult = KiB;
  else if (suffix == "m" || suffix == "mb" || suffix == "mib") mult = MiB;
  else if (suffix == "g" || suffix == "gb" || suffix == "gib") mult = GiB;
  else if (suffix == "t" || suffix == "tb" || suffix == "tib") mult = 1024 * GiB;
  else return std::nullopt;
  if (number.find('.') == std::string_view::npos) {
    auto v = parse_u64(number);
    if (!v || *v > std::numeric_limits<std::uint64_t>::max() / mult) return std::nullopt;
    return *v * mult;
  }
  if (number.empty() || number == ".") return std::nullopt;
  double d = 0;
  auto [p, ec] = std::from_chars(number.data(), number.data() + number.size(), d);
  if (ec != std::errc() || p != number.data() + number.size()) return std::nullopt;
  long double total = static_cast<long double>(d) * static_cast<long double>(mult);
  if (!(total >= 0) || total > static_cast<long double>(std::numeric_limits<std::uint64_t>::max() / 2)) {
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(total)));
}

std::string format_bytes(std::uint64_t bytes) {
  char buf[48];
  if (bytes >= GiB) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(GiB));
  } else if (bytes >= MiB) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / static_cast<double>(MiB));
  } else if (bytes >= KiB) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(bytes) / static_cast<double>(KiB));
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

}  // namespace stalloc
