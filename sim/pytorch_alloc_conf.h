// The PYTORCH_CUDA_ALLOC_CONF options that change the caching allocator's policy, parsed from the
// same "key:value,key:value" string PyTorch reads, so a simulated run is configured exactly like
// a real one.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string_view>

namespace stalloc {

struct PytorchAllocConf {
  // One entry per power-of-two size interval starting at 1 MiB ([1, 2) MiB, [2, 4) MiB, ...;
  // the last covers everything larger): how many equal steps a request in that interval is
  // rounded up to. 0 or 1 = plain 512-byte rounding.
  static constexpr std::size_t kRoundupIntervals = 16;

  // Blocks at least this large are never split; "unlimited" when not configured.
  std::uint64_t max_split_size = std::numeric_limits<std::uint64_t>::max();
  // Fraction of the capacity above which cached blocks are reclaimed before a new segment
  // (0 = off). Only effective with a capacity, as in PyTorch (per-process memory fraction).
  double garbage_collection_threshold = 0.0;
  std::array<std::uint64_t, kRoundupIntervals> roundup_power2_divisions{};
  bool expandable_segments = false;
};

// Parses a PYTORCH_CUDA_ALLOC_CONF string; the empty string gives PyTorch's defaults.
// Throws UsageError naming the offending key or value (unknown keys included).
PytorchAllocConf parse_pytorch_alloc_conf(std::string_view text);

// The divisions configured for a request of `size` bytes.
std::uint64_t roundup_divisions_for(const PytorchAllocConf& conf, std::uint64_t size);

}  // namespace stalloc
