#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/version.h"
#include "tools/stalloc/command.h"

namespace {

void print_help() {
  std::cout << "stalloc " << STALLOC_VERSION
            << " - plan GPU memory for training from an allocation trace\n\n"
               "usage: stalloc COMMAND [ARGS...]\n       stalloc COMMAND --help\n\ncommands:\n";
  for (const auto& [name, cmd] : stalloc::cli::registry()) {
    std::printf("  %-10s %s\n", name.c_str(), cmd.summary.c_str());
  }
  std::cout << "\noptions:\n  --help     this text\n  --version  print the version\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "stalloc " << STALLOC_VERSION << "\n";
    return 0;
  }
  auto& reg = stalloc::cli::registry();
  auto it = reg.find(args[0]);
  if (it == reg.end()) {
    std::cerr << "stalloc: unknown command '" << args[0] << "' (see stalloc --help)\n";
    return 2;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  for (const auto& a : rest) {
    if (a == "--help" || a == "-h") {
      std::cout << it->second.usage << "\n";
      return 0;
    }
  }
  try {
    return it->second.run(rest);
  } catch (const stalloc::UsageError& e) {
    std::cerr << "stalloc " << args[0] << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "stalloc " << args[0] << ": " << e.what() << "\n";
    return 1;
  }
}
