// Byte sizes for people: parsing "24GiB"/"512MB"/"1048576" and printing "1.50 GiB".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stalloc {

inline constexpr std::uint64_t KiB = 1024;
inline constexpr std::uint64_t MiB = 1024 * KiB;
inline constexpr std::uint64_t GiB = 1024 * MiB;

// Accepts a plain integer or an integer/decimal with a suffix: B, K/KB/KiB, M/MB/MiB, G/GB/GiB
// (all binary). Returns nullopt for anything else, including overflow.
std::optional<std::uint64_t> parse_bytes(std::string_view text);

std::string format_bytes(std::uint64_t bytes);

// Strict unsigned integer parsing: the whole string, no sign, no overflow.
std::optional<std::uint64_t> parse_u64(std::string_view text);

}  // namespace stalloc
