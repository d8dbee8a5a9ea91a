// Subcommand registry of the stalloc CLI. Each cmd_*.cpp defines one subcommand and registers it
// at static-initialisation time, so adding a subcommand touches no shared file.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace stalloc::cli {

struct Command {
  std::string name;
  std::string summary;  // one line for `stalloc --help`
  std::string usage;    // full text for `stalloc NAME --help`
  // Arguments after the subcommand name. Returns the exit code.
  std::function<int(const std::vector<std::string>& args)> run;
};

std::map<std::string, Command>& registry();

struct Registrar {
  explicit Registrar(Command c);
};

// Tiny argument scanner shared by subcommands: flags, flags with a value, positionals.
class Args {
 public:
  explicit Args(std::vector<std::string> args) : args_(std::move(args)) {}
  // True if --name is present (removes it).
  bool flag(const std::string& name);
  // Value of --name VALUE or --name=VALUE (removes both); empty optional-like "" when absent,
  // and sets *present. Throws UsageError when the value is missing.
  bool option(const std::string& name, std::string* value);
  // Every value of a repeated option.
  std::vector<std::string> options(const std::string& name);
  // What remains; throws UsageError on an unknown --option.
  std::vector<std::string> positionals() const;

 private:
  std::vector<std::string> args_;
};

}  // namespace stalloc::cli

#define STALLOC_CONCAT2(a, b) a##b
#define STALLOC_CONCAT(a, b) STALLOC_CONCAT2(a, b)
#define STALLOC_COMMAND(...) \
  static const ::stalloc::cli::Registrar STALLOC_CONCAT(stalloc_command_, __LINE__){__VA_ARGS__}
