// The generator's randomness: a portable counter-based generator (SplitMix64, the same numbers
// on every platform and standard library, unlike std::*_distribution), the per-iteration
// sequence lengths and the per-micro-batch MoE routing.
#pragma once

#include <cstdint>
#include <vector>

#include "workload/generator.h"

namespace stalloc::gen {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  // A generator for one (seed, a, b, c) tuple: draws do not depend on the order of other draws.
  static Rng keyed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0);

  std::uint64_t next();
  double uniform();                                  // [0, 1)
  double normal();                                   // standard normal (Box-Muller)
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi);  // [lo, hi]

 private:
  std::uint64_t state_;
};

// Sequence length of each iteration: seq_list cycled, or drawn uniformly in [seq_min, seq_max]
// (rounded down to a multiple of tp under sequence parallelism), or seq_len throughout.
std::vector<std::uint64_t> iteration_sequence_lengths(const GeneratorConfig& cfg);

// Packed documents (cfg.doc_max > 0): how many documents fill one micro-batch's `seq` tokens,
// lengths drawn uniformly in [doc_min, doc_max] from a generator keyed by (seed, iteration,
// micro-batch), the last one cut to what is left. 1 when documents are not packed.
std::uint64_t document_count(const GeneratorConfig& cfg, std::uint64_t seq, std::uint64_t iteration,
                             std::uint64_t microbatch);

// Token-to-expert assignments of all `experts` for one (iteration, micro-batch, layer):
// `assignments` (tokens * top_k over the expert-parallel group) split by a skewed popularity
// (Zipf with exponent routing_skew over a per-layer permutation of the experts, perturbed per
// micro-batch by log-normal noise). Sums to `assignments`; deterministic for the key.
std::vector<std::uint64_t> expert_token_counts(const GeneratorConfig& cfg, std::uint64_t assignments,
                                               std::uint64_t iteration, std::uint64_t microbatch,
                                               std::uint64_t layer);

}  // namespace stalloc::gen
