// Shared by the vmm tests: the backends every conformance case runs on, and data patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vmm/driver.h"

namespace stalloc::vmm::testing {

inline constexpr std::size_t kHostTestGranularity = 64 * 1024;

// "host": a host driver of 64 KiB granularity; "host-unbacked": the same, unbacked (books only,
// no memory). "cuda": device 0, or nullptr with *why set when it cannot be had.
std::unique_ptr<Driver> make_test_driver(const std::string& backend, std::string* why);

// True when the environment asks for the cuda backend to run rather than skip (gpu_check.sh).
bool cuda_required();

// A pattern that differs per seed and per byte, so misplaced data shows.
std::vector<std::uint8_t> pattern(std::size_t size, std::uint32_t seed);

// The line of /proc/self/maps for the area holding an address (empty fields when none).
struct MapsLine {
  std::uintptr_t start = 0;
  std::string perms;   // "rw-s"
  std::string offset;  // the file offset column, hexadecimal
};
MapsLine maps_line_of(std::uintptr_t address);

// The permissions column of /proc/self/maps ("rw-s") for the area holding address, or "" when
// no area holds it.
std::string protection_of(std::uintptr_t address);

// The memory areas the process has now (lines of /proc/self/maps).
std::size_t process_areas();

// The memfds host drivers hold open, and the memory their pages take, from /proc/self/fd.
struct MemfdUsage {
  std::size_t files = 0;
  std::size_t bytes = 0;
};
MemfdUsage host_driver_memfds();

}  // namespace stalloc::vmm::testing
