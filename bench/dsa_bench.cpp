// Offset (DSA) planner: the MiniMalloc "challenging" instances A..K at their capacity (10 s
// limit), training-like instances of 1k to 100k buffers (10 s limit) and irregular compiler-style
// instances of 10k to 100k buffers (30 s limit; planner/dsa/dsa_generator.h), each against plain
// best-fit-decreasing on the same instance. Counters: peak / capacity (MiniMalloc) or peak /
// lower bound, milliseconds, and whether the run stopped at the lower bound. Results and the
// commands are in docs/benchmarks.md, "Offset planner" and "Offset planner: anytime search".
#include <benchmark/benchmark.h>

#include <string>

#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_csv.h"
#include "planner/dsa/dsa_generator.h"

namespace {

using namespace stalloc;

constexpr std::uint64_t kMiniMallocCapacity = 1048576;
constexpr const char* kInstances[] = {"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K"};

std::vector<DsaBuffer> minimalloc(const std::string& name) {
  return read_dsa_csv_file(std::string(STALLOC_SOURCE_DIR) + "/tests/data/minimalloc/" + name +
                           ".1048576.csv")
      .buffers;
}

double ratio(std::uint64_t peak, std::uint64_t reference) {
  return static_cast<double>(peak) / static_cast<double>(reference);
}

void BM_MiniMalloc(benchmark::State& state, const std::string& name) {
  DsaProblem problem;
  problem.buffers = minimalloc(name);
  problem.capacity = kMiniMallocCapacity;
  DsaSolution solution;
  for (auto _ : state) solution = solve_dsa(problem, DsaOptions{});
  state.counters["peak_over_capacity"] = ratio(solution.peak_bytes, kMiniMallocCapacity);
  state.counters["within_capacity"] = solution.within_capacity ? 1 : 0;
  state.counters["ms"] = solution.milliseconds;
  state.SetLabel(solution.strategy);
}

std::uint64_t best_fit_decreasing_peak(const std::vector<DsaBuffer>& buffers) {
  DsaProblem problem;
  problem.buffers = buffers;
  return best_fit_decreasing(problem).peak_bytes;
}

void BM_MiniMallocBestFitDecreasing(benchmark::State& state, const std::string& name) {
  const auto buffers = minimalloc(name);
  std::uint64_t peak = 0;
  for (auto _ : state) peak = best_fit_decreasing_peak(buffers);
  state.counters["peak_over_capacity"] = ratio(peak, kMiniMallocCapacity);
}

void BM_TrainingLike(benchmark::State& state) {
  DsaProblem problem;
  problem.buffers = generate_dsa_instance({DsaInstanceKind::Training, static_cast<std::size_t>(state.range(0)), 7});
  DsaOptions options;
  options.time_limit_seconds = 10;  // it stops at the lower bound, in about a second
  DsaSolution solution;
  for (auto _ : state) solution = solve_dsa(problem, options);
  state.counters["peak_over_lower_bound"] = ratio(solution.peak_bytes, solution.lower_bound_bytes);
  state.counters["ms"] = solution.milliseconds;
  state.counters["at_lower_bound"] = solution.stopped_at_lower_bound() ? 1 : 0;
  state.SetLabel(solution.strategy);
}

// Irregular compiler-style instances (args: buffers, seed) with the 30 s limit of issue 20.
void BM_Irregular(benchmark::State& state) {
  DsaProblem problem;
  problem.buffers = generate_dsa_instance({DsaInstanceKind::Irregular,
                                           static_cast<std::size_t>(state.range(0)),
                                           static_cast<std::uint64_t>(state.range(1))});
  DsaOptions options;
  options.time_limit_seconds = 30;
  DsaSolution solution;
  for (auto _ : state) solution = solve_dsa(problem, options);
  state.counters["peak_over_lower_bound"] = ratio(solution.peak_bytes, solution.lower_bound_bytes);
  state.counters["bfd_over_lower_bound"] =
      ratio(solution.best_fit_decreasing_peak_bytes, solution.lower_bound_bytes);
  state.counters["ms"] = solution.milliseconds;
  state.counters["at_lower_bound"] = solution.stopped_at_lower_bound() ? 1 : 0;
  state.SetLabel(solution.strategy);
}

void BM_IrregularBestFitDecreasing(benchmark::State& state) {
  DsaProblem problem;
  problem.buffers = generate_dsa_instance({DsaInstanceKind::Irregular,
                                           static_cast<std::size_t>(state.range(0)),
                                           static_cast<std::uint64_t>(state.range(1))});
  DsaSolution solution;
  for (auto _ : state) solution = best_fit_decreasing(problem);
  state.counters["peak_over_lower_bound"] = ratio(solution.peak_bytes, solution.lower_bound_bytes);
  state.counters["ms"] = solution.milliseconds;
}

void BM_TrainingLikeBestFitDecreasing(benchmark::State& state) {
  DsaProblem problem;
  problem.buffers = generate_dsa_instance({DsaInstanceKind::Training, static_cast<std::size_t>(state.range(0)), 7});
  const std::uint64_t lower_bound = dsa_lower_bound(problem);
  std::uint64_t peak = 0;
  for (auto _ : state) peak = best_fit_decreasing_peak(problem.buffers);
  state.counters["peak_over_lower_bound"] = ratio(peak, lower_bound);
}

const bool registered = [] {
  for (const char* name : kInstances) {
    benchmark::RegisterBenchmark((std::string("MiniMalloc/") + name).c_str(), BM_MiniMalloc, name)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("MiniMallocBestFitDecreasing/") + name).c_str(),
                                 BM_MiniMallocBestFitDecreasing, name)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

BENCHMARK(BM_TrainingLike)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(60000)
    ->Arg(100000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Irregular)
    ->ArgsProduct({{10000, 50000, 100000}, {1, 2, 3}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IrregularBestFitDecreasing)
    ->ArgsProduct({{10000, 50000, 100000}, {1, 2, 3}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TrainingLikeBestFitDecreasing)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
