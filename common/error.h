// Errors that reach a user carry where they happened: a file, a line, and what was expected.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace stalloc {

// Bad input in a file: "trace.txt:12: expected 'a' or 'f', got 'x'".
class ParseError : public std::runtime_error {
 public:
  ParseError(const std::string& file, std::size_t line, const std::string& what);
  const std::string& file() const { return file_; }
  std::size_t line() const { return line_; }

 private:
  std::string file_;
  std::size_t line_;
};

// Bad usage or an impossible request (a plan for another trace, an unknown preset, ...).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace stalloc
