#include "src/runtime_config.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>
#include <sstream>

#include "common/units.h"

namespace stalloc {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_value(std::string_view key, std::string_view value, std::string_view allowed) {
  throw ConfigError("STALLOC_CONF: bad value '" + std::string(value) + "' for key '" +
                    std::string(key) + "': expected " + std::string(allowed));
}

bool parse_bool(std::string_view key, std::string_view value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  bad_value(key, value, "true or false");
}

std::uint32_t parse_count(std::string_view key, std::string_view value, std::uint32_t min,
                          std::uint32_t max) {
  auto v = parse_u64(value);
  if (!v || *v < min || *v > max) {
    bad_value(key, value,
              "an integer from " + std::to_string(min) + " to " + std::to_string(max));
  }
  return static_cast<std::uint32_t>(*v);
}

std::uint64_t parse_size(std::string_view key, std::string_view value) {
  auto v = parse_bytes(value);
  if (!v) bad_value(key, value, "a byte size such as 2097152, 2MiB or 24GiB");
  return *v;
}

void apply(RuntimeConfig& c, std::string_view key, std::string_view value) {
  if (key == "backend") {
    if (value != "host" && value != "cuda" && value != "auto") bad_value(key, value, "host, cuda or auto");
    c.backend = std::string(value);
  } else if (key == "mode") {
    c.mode_auto = value == "auto";
    if (value == "alias" || value == "auto") {
      c.mode = PlanMode::Alias;
    } else if (value == "offset") {
      c.mode = PlanMode::Offset;
    } else if (value == "windowed") {
      c.mode = PlanMode::Windowed;
    } else {
      bad_value(key, value, "auto, alias, offset or windowed");
    }
  } else if (key == "profile_iterations") {
    c.profile_iterations = parse_count(key, value, 0, 1000);
  } else if (key == "granularity") {
    c.granularity = parse_size(key, value);
    // 0 keeps the driver's own granularity.
    if ((c.granularity & (c.granularity - 1)) != 0 || c.granularity > (1ull << 30)) {
      bad_value(key, value, "0 or a power of two number of bytes up to 1GiB, e.g. 2MiB");
    }
  } else if (key == "max_mappings") {
    c.max_mappings = parse_count(key, value, 0, std::numeric_limits<std::uint32_t>::max());
  } else if (key == "large_size") {
    c.large_size = parse_size(key, value);
  } else if (key == "small_size") {
    c.small_size = parse_size(key, value);
    if (c.small_size > (64ull << 20)) bad_value(key, value, "a byte size up to 64MiB");
  } else if (key == "online_page") {
    c.online_page = parse_size(key, value);
    if (c.online_page > (1ull << 30)) bad_value(key, value, "a byte size up to 1GiB");
  } else if (key == "extent_size") {
    c.extent_size = parse_size(key, value);
    if (c.extent_size > (1ull << 30)) bad_value(key, value, "a byte size up to 1GiB");
  } else if (key == "capacity") {
    c.capacity = parse_size(key, value);
  } else if (key == "auto_step") {
    c.auto_step = parse_bool(key, value);
  } else if (key == "plan_cache_size") {
    c.plan_cache_size = parse_count(key, value, 1, 1024);
  } else if (key == "record_trace") {
    c.record_trace = parse_bool(key, value);
  } else if (key == "windows") {
    c.windows = parse_count(key, value, 1, 4096);
  } else if (key == "lookahead") {
    c.lookahead = parse_count(key, value, 0, 4096);
  } else if (key == "pool_runs") {
    c.pool_runs = parse_bool(key, value);
  } else if (key == "varying_sizes") {
    if (value == "off") {
      c.varying_sizes = VaryingSizes::Off;
    } else if (value == "dynamic") {
      c.varying_sizes = VaryingSizes::Dynamic;
    } else if (value == "largest") {
      c.varying_sizes = VaryingSizes::Largest;
    } else if (value == "auto") {
      c.varying_sizes = VaryingSizes::Auto;
    } else {
      bad_value(key, value, "off, dynamic, largest or auto");
    }
  } else if (key == "peer_access") {
    if (value != "none" && value != "all") bad_value(key, value, "none or all");
    c.peer_access = value == "all";
  } else if (key == "log") {
    if (value.empty()) bad_value(key, value, "a file path");
    c.log = std::string(value);
  } else {
    throw ConfigError("STALLOC_CONF: unknown key '" + std::string(key) +
                      "': known keys are backend, mode, profile_iterations, granularity, "
                      "small_size, large_size, online_page, extent_size, capacity, max_mappings, auto_step, plan_cache_size, record_trace, windows, "
                      "lookahead, pool_runs, varying_sizes, peer_access, log");
  }
}

}  // namespace

RuntimeConfig parse_runtime_config(std::string_view text, RuntimeConfig config) {
  std::vector<std::string> seen;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      throw ConfigError("STALLOC_CONF: expected key:value, got '" + std::string(item) + "'");
    }
    const std::string key(trim(item.substr(0, colon)));
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw ConfigError("STALLOC_CONF: key '" + key + "' given twice");
    }
    seen.push_back(key);
    apply(config, key, trim(item.substr(colon + 1)));
  }
  return config;
}

std::string format_runtime_config(const RuntimeConfig& c) {
  std::ostringstream out;
  out << "backend:" << c.backend << ",mode:" << (c.mode_auto ? "auto" : plan_mode_name(c.mode))
      << ",profile_iterations:" << c.profile_iterations << ",granularity:" << c.granularity
      << ",small_size:" << c.small_size << ",large_size:" << c.large_size
      << ",online_page:" << c.online_page << ",extent_size:" << c.extent_size
      << ",capacity:" << c.capacity << ",max_mappings:" << c.max_mappings
      << ",auto_step:" << (c.auto_step ? "true" : "false")
      << ",plan_cache_size:" << c.plan_cache_size
      << ",record_trace:" << (c.record_trace ? "true" : "false") << ",windows:" << c.windows
      << ",lookahead:" << c.lookahead << ",pool_runs:" << (c.pool_runs ? "true" : "false")
      << ",varying_sizes:"
      << (c.varying_sizes == VaryingSizes::Off       ? "off"
          : c.varying_sizes == VaryingSizes::Dynamic ? "dynamic"
          : c.varying_sizes == VaryingSizes::Largest ? "largest"
                                                     : "auto")
      << ",peer_access:" << (c.peer_access ? "all" : "none");
  if (!c.log.empty()) out << ",log:" << c.log;
  return out.str();
}

}  // namespace stalloc
