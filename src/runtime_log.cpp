#include "src/runtime_log.h"

#include <fstream>

namespace stalloc {

void RuntimeLog::operator()(const std::string& line) const {
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << line << "\n";
}

}  // namespace stalloc
