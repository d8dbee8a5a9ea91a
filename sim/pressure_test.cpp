#include "sim/pressure_test.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "sim/simulator.h"

namespace stalloc {
namespace {

std::uint64_t round_up(std::uint64_t bytes, std::uint64_t step) {
  return (bytes + step - 1) / step * step;
}

}  // namespace

PressureResult find_min_capacity(std::string_view allocator, std::uint64_t lower_bound,
                                 std::uint64_t step, const CapacityProbe& probe) {
  if (step == 0) throw UsageError("stress: the capacity step must be above 0");
  PressureResult r;
  r.allocator = std::string(allocator);
  r.lower_bound_bytes = lower_bound;
  auto fits = [&](std::uint64_t capacity) {
    std::uint64_t peak = 0;
    ++r.replays;
    return probe(capacity, &peak);
  };
  ++r.replays;
  const bool unlimited_fits = probe(0, &r.unlimited_peak_reserved_bytes);
  if (lower_bound == 0) {
    r.found = unlimited_fits;
    return r;
  }
  // Below the lower bound nothing fits; the largest multiple of the step below it is the
  // lower end, known to fail without a replay.
  std::uint64_t lo = round_up(lower_bound, step) - step;
  std::uint64_t hi = round_up(std::max(r.unlimited_peak_reserved_bytes, lower_bound), step);
  const std::uint64_t give_up = hi * 64;
  while (!fits(hi)) {
    lo = hi;
    hi *= 2;
    if (hi > give_up) return r;
  }
  while (hi - lo > step) {
    const std::uint64_t mid = lo + (hi - lo) / step / 2 * step;
    (fits(mid) ? hi : lo) = mid;
  }
  r.found = true;
  r.min_capacity_bytes = hi;
  r.ratio_to_lower_bound = static_cast<double>(hi) / static_cast<double>(lower_bound);
  return r;
}

CapacityProbe model_capacity_probe(const Trace& trace, std::string_view allocator,
                                   const ModelOptions& base) {
  return [&trace, name = std::string(allocator), base](std::uint64_t capacity,
                                                       std::uint64_t* peak_reserved) {
    ModelOptions options = base;
    options.capacity = capacity;
    const SimResult s = simulate(trace, "stress", name, options, 1);
    *peak_reserved = s.peak_reserved_bytes;
    return !s.oom;
  };
}

}  // namespace stalloc
