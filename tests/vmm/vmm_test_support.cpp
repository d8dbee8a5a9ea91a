#include "tests/vmm/vmm_test_support.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "vmm/driver_factory.h"
#include "vmm/host_driver.h"

namespace stalloc::vmm::testing {

std::unique_ptr<Driver> make_test_driver(const std::string& backend, std::string* why) {
  HostDriverOptions options;
  options.granularity = kHostTestGranularity;
  if (backend == "host-unbacked") {
    options.backed = false;
    return make_host_driver(options);
  }
  try {
    return make_driver(backend, options);
  } catch (const DriverUnavailable& e) {
    *why = e.what();
    return nullptr;
  }
}

bool cuda_required() {
  const char* value = std::getenv("STALLOC_REQUIRE_CUDA");
  return value != nullptr && std::string(value) == "1";
}

std::vector<std::uint8_t> pattern(std::size_t size, std::uint32_t seed) {
  std::vector<std::uint8_t> bytes(size);
  std::uint32_t state = seed * 2654435761u + 1;
  for (auto& b : bytes) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(state >> 24);
  }
  return bytes;
}

MapsLine maps_line_of(std::uintptr_t address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    MapsLine m;
    std::istringstream fields(line);
    std::string range;
    fields >> range >> m.perms >> m.offset;
    const auto dash = range.find('-');
    m.start = std::stoull(range.substr(0, dash), nullptr, 16);
    const std::uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (address >= m.start && address < end) return m;
  }
  return {};
}

std::string protection_of(std::uintptr_t address) { return maps_line_of(address).perms; }

std::size_t process_areas() {
  std::ifstream in("/proc/self/maps");
  std::size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

MemfdUsage host_driver_memfds() {
  MemfdUsage usage;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const auto target = std::filesystem::read_symlink(entry.path(), error).string();
    if (error || target.rfind("/memfd:stalloc-chunks", 0) != 0) continue;
    struct stat info {};
    if (stat(entry.path().c_str(), &info) != 0) continue;
    ++usage.files;
    usage.bytes += static_cast<std::size_t>(info.st_blocks) * 512;
  }
  return usage;
}

}  // namespace stalloc::vmm::testing
