// The runtime's event log (STALLOC_CONF log:PATH): plans made, installed, declined, out of
// memory. One line per event, appended; nothing when no path is set.
#pragma once

#include <string>

namespace stalloc {

class RuntimeLog {
 public:
  explicit RuntimeLog(std::string path) : path_(std::move(path)) {}
  void operator()(const std::string& line) const;

 private:
  std::string path_;
};

}  // namespace stalloc
