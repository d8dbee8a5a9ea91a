#include "sim/time_estimate.h"

#include <algorithm>
#include <cstdlib>
#include <map>

namespace stalloc {
namespace {

constexpr GpuSpec kGpus[] = {
    {"a100", 312e12},  // A100 SXM, dense bf16 (NVIDIA A100 datasheet)
    {"h100", 989e12},  // H100 SXM, dense bf16 (NVIDIA H100 datasheet)
    {"h200", 989e12},  // H200 SXM: the H100's compute (NVIDIA H200 datasheet), more memory
};

double timestamp_seconds(const Trace& trace) {
  std::map<std::uint32_t, std::pair<std::int64_t, std::int64_t>> spans;  // first, last time
  for (const Event& e : trace.events) {
    if (e.time_ns < 0) continue;
    auto [it, fresh] = spans.try_emplace(e.iteration, e.time_ns, e.time_ns);
    if (!fresh) {
      it->second.first = std::min(it->second.first, e.time_ns);
      it->second.second = std::max(it->second.second, e.time_ns);
    }
  }
  if (spans.empty()) return 0.0;
  if (spans.size() == 1) {
    const auto& [first, last] = spans.begin()->second;
    return static_cast<double>(last - first) * 1e-9;
  }
  // Each iteration but the last runs until the next one starts.
  std::vector<double> seconds;
  for (auto it = spans.begin(); std::next(it) != spans.end(); ++it) {
    seconds.push_back(static_cast<double>(std::next(it)->second.first - it->second.first) * 1e-9);
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

const GpuSpec* find_gpu_spec(std::string_view name) {
  for (const GpuSpec& gpu : kGpus) {
    if (gpu.name == name) return &gpu;
  }
  return nullptr;
}

IterationTime iteration_time(const Trace& trace, const GpuSpec& gpu) {
  if (const double s = timestamp_seconds(trace); s > 0.0) return {s, "time stamps"};
  if (auto it = trace.meta.find("flops_per_iteration"); it != trace.meta.end()) {
    const double flops = std::strtod(it->second.c_str(), nullptr);
    if (flops > 0.0) return {flops / (gpu.peak_flops * kAssumedMfu), "FLOPs at 40% MFU"};
  }
  return {0.0, "unknown"};
}

void estimate_time(const Trace& trace, const GpuSpec& gpu, const vmm::CostTable& costs,
                   SimResult* result, std::uint64_t run_iterations) {
  SimResult::TimeEstimate& t = result->time;
  const IterationTime iteration = iteration_time(trace, gpu);
  t.gpu = std::string(gpu.name);
  t.iteration_seconds = iteration.seconds;
  t.iteration_source = iteration.source;
  t.run_iterations = run_iterations;
  const auto& calls = result->iteration_calls;
  t.allocator_seconds.clear();
  for (const vmm::CallTally& c : calls) t.allocator_seconds.push_back(vmm::estimate_seconds(c, costs));
  if (calls.empty()) return;
  t.allocator_seconds_steady = vmm::estimate_seconds(calls.back(), costs);
  t.first_calls = calls.back();
  t.allocator_seconds_first = t.allocator_seconds_steady;
  for (std::size_t i = 0; i + 1 < calls.size(); ++i) {
    const double s = vmm::estimate_seconds(calls[i], costs);
    if (i == 0 || s > t.allocator_seconds_first) {
      t.first_calls = calls[i];
      t.allocator_seconds_first = s;
    }
  }
  t.allocator_seconds_run = 0.0;
  const std::size_t simulated = std::min<std::uint64_t>(run_iterations, calls.size());
  for (std::size_t i = 0; i < simulated; ++i) t.allocator_seconds_run += t.allocator_seconds[i];
  t.allocator_seconds_run +=
      static_cast<double>(run_iterations - simulated) * t.allocator_seconds_steady;
  if (iteration.seconds > 0.0) {
    t.overhead_first = t.allocator_seconds_first / iteration.seconds;
    t.overhead_steady = t.allocator_seconds_steady / iteration.seconds;
    if (run_iterations > 0) {
      t.overhead_run =
          t.allocator_seconds_run / (static_cast<double>(run_iterations) * iteration.seconds);
    }
  }
}

}  // namespace stalloc
