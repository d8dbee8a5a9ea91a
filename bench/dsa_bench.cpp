// Offset (DSA) planner: the MiniMalloc "challenging" instances A..K at their capacity (10 s
// search limit), and training-like random instances of 1k to 100k buffers (2 s search limit),
// each against plain best-fit-decreasing (one portfolio member alone). Counters: peak / capacity
// (MiniMalloc) or peak / lower bound (random), and milliseconds. Results and the command are in
// docs/benchmarks.md, "Offset planner".
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_conflict_index.h"
#include "planner/dsa/dsa_csv.h"
#include "planner/dsa/dsa_heuristics.h"

namespace {

using namespace stalloc;

constexpr std::uint64_t kMiniMallocCapacity = 1048576;
constexpr const char* kInstances[] = {"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K"};

std::vector<DsaBuffer> minimalloc(const std::string& name) {
  return read_dsa_csv_file(std::string(STALLOC_SOURCE_DIR) + "/tests/data/minimalloc/" + name +
                           ".1048576.csv")
      .buffers;
}

// A training run in miniature: per iteration, a forward pass over the layers keeps one
// activation per layer until the backward pass frees it, each layer also makes short-lived
// temporaries, and the backward pass makes gradients that live until the optimizer step. Sizes
// vary per layer and jitter per iteration. Weights live for the whole run.
std::vector<DsaBuffer> training_like(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int layers = 48;
  std::vector<std::uint64_t> layer_size(layers);
  for (auto& s : layer_size) s = (64 + rng() % 448) * 4096;
  std::vector<DsaBuffer> out;
  std::uint64_t time = 0;
  auto add = [&](std::uint64_t lower, std::uint64_t upper, std::uint64_t size) {
    if (out.size() < n) out.push_back({out.size(), lower, upper, size, 512});
  };
  const std::size_t weights = std::min<std::size_t>(n / 20, layers);
  for (std::size_t w = 0; w < weights; ++w) add(0, UINT64_MAX / 2, layer_size[w] / 2);
  while (out.size() < n) {
    std::vector<std::uint64_t> activation_start(layers);
    for (int l = 0; l < layers; ++l) {
      activation_start[l] = time++;
      for (int t = 0; t < 3; ++t) {
        const std::uint64_t lower = time++;
        add(lower, lower + 1 + rng() % 3, layer_size[l] / (1 + rng() % 4));
      }
    }
    const std::uint64_t backward_end = time + 4 * static_cast<std::uint64_t>(layers) + 2;
    for (int l = layers - 1; l >= 0; --l) {
      const std::uint64_t jitter = (rng() % 64) * 512;
      add(activation_start[l], time++, layer_size[l] + jitter);
      add(time++, backward_end, layer_size[l] / 2);  // gradient until the optimizer step
      const std::uint64_t lower = time++;
      add(lower, lower + 2, layer_size[l]);
    }
    time = backward_end + 1;
  }
  // Give the weights the whole run, now that its end is known.
  for (std::size_t w = 0; w < weights; ++w) out[w].upper = time;
  return out;
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

// Best-fit-decreasing: sizes from largest, each in the tightest gap among what it overlaps.
std::uint64_t best_fit_decreasing(const std::vector<DsaBuffer>& buffers) {
  const dsa_detail::DsaConflictIndex index(buffers);
  const auto order = dsa_detail::make_order(buffers, index, dsa_detail::Ordering::SizeDesc);
  return dsa_detail::placement_peak(
      buffers, dsa_detail::place_in_order(buffers, index, order, dsa_detail::Placement::BestFit));
}

void BM_MiniMallocBestFitDecreasing(benchmark::State& state, const std::string& name) {
  const auto buffers = minimalloc(name);
  std::uint64_t peak = 0;
  for (auto _ : state) peak = best_fit_decreasing(buffers);
  state.counters["peak_over_capacity"] = ratio(peak, kMiniMallocCapacity);
}

void BM_TrainingLike(benchmark::State& state) {
  DsaProblem problem;
  problem.buffers = training_like(static_cast<std::size_t>(state.range(0)), 7);
  DsaOptions options;
  options.time_limit_seconds = 2;
  DsaSolution solution;
  for (auto _ : state) solution = solve_dsa(problem, options);
  state.counters["peak_over_lower_bound"] = ratio(solution.peak_bytes, solution.lower_bound_bytes);
  state.counters["ms"] = solution.milliseconds;
  state.SetLabel(solution.strategy);
}

void BM_TrainingLikeBestFitDecreasing(benchmark::State& state) {
  DsaProblem problem;
  problem.buffers = training_like(static_cast<std::size_t>(state.range(0)), 7);
  const std::uint64_t lower_bound = dsa_lower_bound(problem);
  std::uint64_t peak = 0;
  for (auto _ : state) peak = best_fit_decreasing(problem.buffers);
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
BENCHMARK(BM_TrainingLikeBestFitDecreasing)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
