#include "src/runtime_log.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "src/runtime_config.h"

namespace stalloc {

RuntimeLog::RuntimeLog(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  if (!out) {
    throw ConfigError("STALLOC_CONF: log: cannot write to '" + path_ + "': " +
                      std::strerror(errno));
  }
}

void RuntimeLog::operator()(const std::string& line) const {
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << line << "\n";
}

}  // namespace stalloc
