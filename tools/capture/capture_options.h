// Command line of stalloc-capture.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stalloc::capture {

struct CaptureOptions {
  std::int64_t layers = 4;
  std::int64_t hidden = 256;
  std::int64_t heads = 4;
  std::int64_t vocab = 1024;
  std::int64_t batch = 4;
  std::int64_t micro_batches = 2;
  std::uint32_t iterations = 4;
  std::vector<std::int64_t> seq_lens{128};  // iteration i uses seq_lens[i % size]
  bool recompute = false;
  bool timestamps = false;  // off by default: a capture is then identical on every run
  std::uint64_t seed = 1;
  std::string output;

  std::int64_t seq_len_of(std::uint32_t iteration) const { return seq_lens[iteration % seq_lens.size()]; }
  std::int64_t max_seq_len() const;
  // One line naming every option, stored in the trace's metadata.
  std::string describe() const;
};

extern const char* const kCaptureUsage;

// Throws UsageError naming the bad option.
CaptureOptions parse_capture_options(const std::vector<std::string>& args);

}  // namespace stalloc::capture
