#include "workload/generator_random.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

namespace stalloc::gen {

std::uint64_t Rng::next() {
  state_ += 0x9e3779b97f4a7c15ull;
  std::uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Rng Rng::keyed(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  Rng r(seed);
  for (std::uint64_t k : {a, b, c}) r = Rng(r.next() ^ (k * 0xd6e8feb86659fd93ull));
  return r;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::uint64_t Rng::between(std::uint64_t lo, std::uint64_t hi) {
  return lo + next() % (hi - lo + 1);
}

std::vector<std::uint64_t> iteration_sequence_lengths(const GeneratorConfig& cfg) {
  std::vector<std::uint64_t> out(cfg.iterations, cfg.seq_len);
  if (!cfg.seq_list.empty()) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = cfg.seq_list[i % cfg.seq_list.size()];
  } else if (cfg.seq_max > 0) {
    const std::uint64_t granule = sequence_granule(cfg);
    for (std::size_t i = 0; i < out.size(); ++i) {
      Rng r = Rng::keyed(cfg.seed, 0x5e9, i);
      const std::uint64_t s = r.between(cfg.seq_min, cfg.seq_max);
      out[i] = std::max(cfg.seq_min, s - s % granule);
    }
  }
  return out;
}

std::uint64_t document_count(const GeneratorConfig& cfg, std::uint64_t seq, std::uint64_t iteration,
                             std::uint64_t microbatch) {
  if (cfg.doc_max == 0) return 1;
  Rng r = Rng::keyed(cfg.seed, 0xd0c, iteration, microbatch);
  std::uint64_t left = seq, docs = 0;
  while (left > 0) {
    left -= std::min(left, r.between(cfg.doc_min, cfg.doc_max));
    ++docs;
  }
  return docs;
}

std::vector<std::uint64_t> expert_token_counts(const GeneratorConfig& cfg, std::uint64_t assignments,
                                               std::uint64_t iteration, std::uint64_t microbatch,
                                               std::uint64_t layer) {
  const std::size_t e = cfg.experts;
  // Which experts a layer favours is a property of the trained model: fixed per layer.
  std::vector<std::size_t> rank(e);
  std::iota(rank.begin(), rank.end(), 0);
  Rng perm = Rng::keyed(cfg.seed, 0xe0e, layer);
  for (std::size_t i = e; i > 1; --i) std::swap(rank[i - 1], rank[perm.next() % i]);

  // How many tokens each expert gets varies with the batch.
  Rng noise = Rng::keyed(cfg.seed, iteration, microbatch, layer);
  std::vector<double> weight(e);
  double total = 0;
  for (std::size_t i = 0; i < e; ++i) {
    weight[i] = std::pow(static_cast<double>(rank[i] + 1), -cfg.routing_skew) *
                std::exp(0.5 * noise.normal());
    total += weight[i];
  }
  std::vector<std::uint64_t> counts(e);
  std::vector<std::pair<double, std::size_t>> remainder(e);
  std::uint64_t given = 0;
  for (std::size_t i = 0; i < e; ++i) {
    const double exact = static_cast<double>(assignments) * weight[i] / total;
    counts[i] = static_cast<std::uint64_t>(exact);
    given += counts[i];
    remainder[i] = {exact - static_cast<double>(counts[i]), i};
  }
  std::sort(remainder.begin(), remainder.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (std::size_t i = 0; given < assignments; ++i, ++given) ++counts[remainder[i % e].second];
  return counts;
}

}  // namespace stalloc::gen
