// stalloc-capture: records a real allocation trace from libtorch training on the CPU
// (tests/data/real holds the captures the tests read).
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/units.h"
#include "trace/trace_io.h"
#include "tools/capture/capture_options.h"
#include "tools/capture/recording_allocator.h"
#include "tools/capture/training_loop.h"

int main(int argc, char** argv) {
  using namespace stalloc;
  using namespace stalloc::capture;
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << kCaptureUsage;
      return 0;
    }
  }
  CaptureOptions options;
  try {
    options = parse_capture_options(args);
  } catch (const UsageError& e) {
    std::cerr << "stalloc-capture: " << e.what() << "\n" << kCaptureUsage;
    return 2;
  }
  try {
    RecordingAllocator& recorder = RecordingAllocator::install();
    // One intra-op thread: the allocation order is then the same on every run.
    torch::set_num_threads(1);
    TrainingResult result = record_training(options, recorder);
    const RecordingCounts counts = recorder.counts();
    Trace& trace = result.trace;
    trace.meta["source"] = "stalloc-capture";
    trace.meta["libtorch"] = TORCH_VERSION;
    trace.meta["config"] = options.describe();
    trace.meta["device_kind"] = "cpu";
    trace.meta["ignored_frees"] = std::to_string(counts.ignored_frees);
    trace.meta["zero_byte_allocations"] = std::to_string(counts.zero_byte_allocs);
    write_trace(trace, options.output);

    std::fprintf(stderr,
                 "stalloc-capture: %zu events, %u iterations, lower bound %s, %llu threads, "
                 "%llu frees of earlier blocks ignored, %llu zero-byte allocations, loss %.4f -> %.4f\n",
                 trace.events.size(), options.iterations, format_bytes(lower_bound_bytes(trace)).c_str(),
                 static_cast<unsigned long long>(counts.threads),
                 static_cast<unsigned long long>(counts.ignored_frees),
                 static_cast<unsigned long long>(counts.zero_byte_allocs), result.first_loss,
                 result.last_loss);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "stalloc-capture: " << e.what() << "\n";
    return 1;
  }
}
