// The runtime's event log (STALLOC_CONF log:PATH): plans made, installed, declined, out of
// memory. One line per event, appended; nothing when no path is set. A path that cannot be
// written is refused when the runtime starts (ConfigError), not found out at the first event.
#pragma once

#include <string>

namespace stalloc {

class RuntimeLog {
 public:
  explicit RuntimeLog(std::string path);
  void operator()(const std::string& line) const;

 private:
  std::string path_;
};

}  // namespace stalloc
