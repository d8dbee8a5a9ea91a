#include "tools/stalloc/command.h"

#include "common/error.h"

namespace stalloc::cli {

std::map<std::string, Command>& registry() {
  static std::map<std::string, Command> commands;
  return commands;
}

Registrar::Registrar(Command c) {
  std::string name = c.name;
  registry().emplace(std::move(name), std::move(c));
}

bool Args::flag(const std::string& name) {
  for (auto it = args_.begin(); it != args_.end(); ++it) {
    if (*it == name) {
      args_.erase(it);
      return true;
    }
  }
  return false;
}

bool Args::option(const std::string& name, std::string* value) {
  for (auto it = args_.begin(); it != args_.end(); ++it) {
    if (*it == name) {
      if (it + 1 == args_.end()) throw UsageError("option " + name + " needs a value");
      *value = *(it + 1);
      args_.erase(it, it + 2);
      return true;
    }
    if (it->rfind(name + "=", 0) == 0) {
      *value = it->substr(name.size() + 1);
      args_.erase(it);
      return true;
    }
  }
  return false;
}

std::vector<std::string> Args::options(const std::string& name) {
  std::vector<std::string> values;
  std::string v;
  while (option(name, &v)) values.push_back(v);
  return values;
}

std::vector<std::string> Args::positionals() const {
  for (const auto& a : args_) {
    if (a.size() > 1 && a[0] == '-' && a != "-") throw UsageError("unknown option " + a);
  }
  return args_;
}

}  // namespace stalloc::cli
