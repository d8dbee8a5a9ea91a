// STALLOC_CONF parsing on any string either gives a configuration or raises ConfigError; a
// configuration formats to a string that parses back to the same configuration.
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/runtime_config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stalloc;
  RuntimeConfig config;
  try {
    config = parse_runtime_config(fuzz::as_text(data, size));
  } catch (const ConfigError&) {
    return 0;
  }
  const std::string formatted = format_runtime_config(config);
  try {
    fuzz::require(format_runtime_config(parse_runtime_config(formatted)) == formatted);
  } catch (const ConfigError&) {
    fuzz::require(false);
  }
  return 0;
}
