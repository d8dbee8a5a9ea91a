// Persistent buffers and time components (planner/dsa/dsa_components.h), and what they buy
// solve_dsa: a training-like trace, weights live throughout and iterations that share nothing
// else, is placed at exactly its lower bound.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "planner/dsa/dsa.h"
#include "planner/dsa/dsa_components.h"
#include "tests/planner/dsa/dsa_test_util.h"

namespace stalloc {
namespace {

using dsa_detail::persistent_buffers;
using dsa_detail::split_components;

DsaBuffer buffer(std::uint64_t id, std::uint64_t lower, std::uint64_t upper, std::uint64_t size,
                 std::uint64_t alignment = 1) {
  return DsaBuffer{id, lower, upper, size, alignment};
}

TEST(DsaComponents, PersistentBuffersSpanEverything) {
  const std::vector<DsaBuffer> buffers = {buffer(0, 0, 10, 5), buffer(1, 2, 4, 5),
                                          buffer(2, 0, 9, 5), buffer(3, 0, 10, 7)};
  EXPECT_EQ(persistent_buffers(buffers), (std::vector<std::uint32_t>{0, 3}));
  EXPECT_TRUE(persistent_buffers({buffer(0, 0, 5, 1), buffer(1, 1, 6, 1)}).empty());
  EXPECT_TRUE(persistent_buffers({}).empty());
}

TEST(DsaComponents, SplitWhereNoLifetimeCrosses) {
  // [0,4) and [2,6) chain; [6,8) starts when both are over (half-open); [7,9) overlaps it.
  const std::vector<DsaBuffer> buffers = {buffer(0, 6, 8, 1), buffer(1, 0, 4, 1),
                                          buffer(2, 7, 9, 1), buffer(3, 2, 6, 1)};
  const auto components = split_components(buffers);
  ASSERT_EQ(components.size(), 2u);
  EXPECT_EQ(components[0], (std::vector<std::uint32_t>{1, 3}));
  EXPECT_EQ(components[1], (std::vector<std::uint32_t>{0, 2}));
}

TEST(DsaComponents, PersistentBuffersGoUnderEverythingElse) {
  DsaProblem p;
  p.buffers = {buffer(0, 0, 10, 8), buffer(1, 0, 10, 100, 64), buffer(2, 1, 5, 30, 16),
               buffer(3, 5, 9, 20, 16)};
  const DsaSolution s = solve_dsa(p);
  const auto report = dsa_test::check(p.buffers, s.offsets);
  ASSERT_TRUE(report.ok) << report.error;
  EXPECT_EQ(s.offsets[1], 0u);  // most aligned first
  EXPECT_EQ(s.offsets[0], 100u);
  EXPECT_EQ(s.offsets[2], 112u);  // above both, at the rest's alignment
  EXPECT_EQ(s.offsets[3], 112u);
  EXPECT_EQ(s.peak_bytes, 142u);
}

// Weights for the whole run; per iteration activations kept from forward to backward, short
// temporaries, gradients until the step. Sizes jitter per iteration, so one iteration sets the
// lower bound and the others must still fit under it.
std::vector<DsaBuffer> training_iterations(int iterations, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  constexpr int kLayers = 12;
  std::vector<DsaBuffer> out;
  for (int w = 0; w < 6; ++w) out.push_back(buffer(out.size(), 0, 0, (1 + rng() % 8) * 4096, 512));
  std::uint64_t time = 0;
  for (int it = 0; it < iterations; ++it) {
    std::vector<std::uint64_t> start(kLayers);
    std::vector<std::uint64_t> size(kLayers);
    for (int l = 0; l < kLayers; ++l) {
      start[static_cast<std::size_t>(l)] = time++;
      size[static_cast<std::size_t>(l)] = (16 + rng() % 112) * 4096 + (rng() % 8) * 512;
      const std::uint64_t t = time++;
      out.push_back(buffer(out.size(), t, t + 2, (1 + rng() % 64) * 4096, 512));
    }
    const std::uint64_t step = time + 2 * kLayers + 1;
    for (int l = kLayers - 1; l >= 0; --l) {
      out.push_back(buffer(out.size(), start[static_cast<std::size_t>(l)], time++,
                           size[static_cast<std::size_t>(l)], 512));
      out.push_back(buffer(out.size(), time++, step, size[static_cast<std::size_t>(l)] / 2, 512));
    }
    time = step + 1;
  }
  for (int w = 0; w < 6; ++w) out[static_cast<std::size_t>(w)].upper = time;
  return out;
}

TEST(DsaComponents, TrainingIterationsReachTheLowerBound) {
  DsaProblem p;
  p.buffers = training_iterations(20, 3);
  DsaOptions options;
  options.time_limit_seconds = 0;
  options.work_limit = 10'000;  // the portfolio reaches it on every component: no search work
  const DsaSolution s = solve_dsa(p, options);
  const auto report = dsa_test::check(p.buffers, s.offsets);
  ASSERT_TRUE(report.ok) << report.error;
  EXPECT_EQ(report.peak_bytes, s.peak_bytes);
  EXPECT_EQ(s.peak_bytes, s.lower_bound_bytes);
}

TEST(DsaComponents, PortfolioPerComponentIsDeterministicAcrossThreading) {
  DsaProblem p;
  p.buffers = training_iterations(30, 8);
  DsaOptions options;
  options.time_limit_seconds = 0;
  const DsaSolution parallel = solve_dsa(p, options);
  options.parallel = false;
  const DsaSolution serial = solve_dsa(p, options);
  EXPECT_EQ(parallel.offsets, serial.offsets);
  EXPECT_EQ(parallel.strategy, serial.strategy);
  EXPECT_TRUE(dsa_test::check(p.buffers, parallel.offsets).ok);
}

}  // namespace
}  // namespace stalloc
