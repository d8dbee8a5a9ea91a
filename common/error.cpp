#include "common/error.h"

namespace stalloc {

namespace {
std::string format_location(const std::string& file, std::size_t line, const std::string& what) {
  if (line == 0) return file + ": " + what;
  return file + ":" + std::to_string(line) + ": " + what;
}
}  // namespace

ParseError::ParseError(const std::string& file, std::size_t line, const std::string& what)
    : std::runtime_error(format_location(file, line, what)), file_(file), line_(line) {}

}  // namespace stalloc
