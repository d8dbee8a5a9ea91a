// Hand-made and random traces for the physical-chunk planner tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "trace/trace.h"
#include "trace/trace_builder.h"

namespace stalloc::testing {

inline constexpr std::uint64_t kG = 2ull << 20;

using stalloc::TraceBuilder;

// Several identical iterations of a random training-like step: a mix of chunk-sized tensors with
// tails and small ones, freed in roughly reverse order, some carried into the next iteration.
inline Trace random_training_trace(std::uint64_t seed, int iterations, int tensors) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(tensors));
  for (auto& s : sizes) {
    const std::uint64_t r = rng() % 4;
    if (r == 0) {
      s = 512 + rng() % (64 * 1024);
    } else if (r == 1) {
      s = 512 * (1 + rng() % (kG / 512));
    } else {
      s = kG * (1 + rng() % 12) + 512 * (rng() % (kG / 512));
    }
  }
  // Free order: a random mix of stack-like and random releases, decided once so every iteration
  // has the same lifetimes.
  std::vector<int> plan_free_after(static_cast<std::size_t>(tensors));
  for (int i = 0; i < tensors; ++i) plan_free_after[static_cast<std::size_t>(i)] = static_cast<int>(rng() % 4);
  TraceBuilder b;
  std::uint64_t next_id = 1;
  std::vector<std::uint64_t> carried;
  for (int it = 0; it < iterations; ++it) {
    const auto iter = static_cast<std::uint32_t>(it);
    std::vector<std::uint64_t> live;
    for (std::uint64_t id : carried) b.at(iter).free(id);
    carried.clear();
    for (int i = 0; i < tensors; ++i) {
      const std::uint64_t id = next_id++;
      b.at(iter).alloc_as(id, sizes[static_cast<std::size_t>(i)]);
      live.push_back(id);
      for (int k = 0; k < plan_free_after[static_cast<std::size_t>(i)] && live.size() > 1; ++k) {
        b.at(iter).free(live[live.size() - 2]);
        live.erase(live.end() - 2);
      }
    }
    if (!live.empty()) {
      carried.push_back(live.back());
      live.pop_back();
    }
    for (auto it2 = live.rbegin(); it2 != live.rend(); ++it2) b.at(iter).free(*it2);
  }
  return b.trace();
}

}  // namespace stalloc::testing
