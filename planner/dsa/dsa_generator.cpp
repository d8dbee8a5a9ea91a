#include "planner/dsa/dsa_generator.h"

#include <algorithm>
#include <random>

namespace stalloc {

namespace {

// Integer-only draws on top of mt19937_64 (whose output the standard fixes), so that an
// instance does not depend on the library's distributions or floating point.
class Draw {
 public:
  explicit Draw(std::uint64_t seed) : rng_(seed) {}
  std::uint64_t next() { return rng_(); }
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi) { return lo + below(hi - lo + 1); }
  bool percent(std::uint64_t p) { return below(100) < p; }
  // Log-uniform in [lo, hi]: a power of two, then uniform inside it.
  std::uint64_t log_uniform(std::uint64_t lo, std::uint64_t hi) {
    const int lo_bits = 63 - __builtin_clzll(lo);
    const int hi_bits = 63 - __builtin_clzll(hi);
    const int bits = lo_bits + static_cast<int>(below(static_cast<std::uint64_t>(hi_bits - lo_bits) + 1));
    const std::uint64_t base = std::uint64_t{1} << bits;
    return std::clamp(base + below(base), lo, hi);
  }

 private:
  std::mt19937_64 rng_;
};

constexpr std::uint64_t kToEnd = UINT64_MAX;  // upper bound set to the program's end at the end

class IrregularProgram {
 public:
  IrregularProgram(std::size_t n, std::uint64_t seed) : n_(n), draw_(seed) {}

  std::vector<DsaBuffer> make() {
    out_.reserve(n_);
    // Weights and constants: about 2% of the buffers, loaded at the start or at first use,
    // dropped after their last use or kept to the end. Their uses are drawn once the program
    // length is known (below); here they are placeholders.
    const std::size_t weights = std::max<std::size_t>(1, n_ / 50);
    std::vector<std::size_t> weight_index;
    for (std::size_t w = 0; w < weights && out_.size() < n_; ++w) {
      weight_index.push_back(out_.size());
      out_.push_back({out_.size(), 0, kToEnd, weight_size(), 1});
    }
    // Phases: 3 to 6, each with its own model width and style, sized by random shares.
    const std::size_t phases = 3 + draw_.below(4);
    std::vector<std::uint64_t> share(phases);
    std::uint64_t total_share = 0;
    for (auto& s : share) total_share += (s = 1 + draw_.below(4));
    const std::size_t budget = n_ - out_.size();
    std::vector<std::size_t> carried;  // phase results: live into a later phase
    for (std::size_t p = 0; p < phases && out_.size() < n_; ++p) {
      const std::size_t goal =
          p + 1 == phases ? n_ : out_.size() + budget * share[p] / total_share;
      width_ = std::uint64_t{1} << (14 + draw_.below(9));  // 16 KiB to 4 MiB
      phase_start_ = time_;
      // Results of earlier phases end somewhere in this one or later.
      std::vector<std::size_t> still;
      for (std::size_t c : carried) {
        if (draw_.percent(60)) {
          pending_ends_.push_back(c);
        } else {
          still.push_back(c);
        }
      }
      carried = std::move(still);
      switch (draw_.below(3)) {
        case 0:
          layer_stack(goal);
          break;
        case 1:
          forward_backward(goal);
          break;
        default:
          dataflow(goal);
          break;
      }
      // A few results live on into later phases.
      for (std::uint64_t r = 1 + draw_.below(4); r > 0; --r) {
        const std::size_t at = out_.size();
        if (!add(time_, kToEnd, activation_size())) break;
        carried.push_back(at);
      }
      // The results that were to end in this phase end at random steps of it.
      for (std::size_t c : pending_ends_) {
        out_[c].upper = std::max(out_[c].lower + 1, phase_start_ + draw_.below(time_ - phase_start_ + 1));
      }
      pending_ends_.clear();
      ++time_;
    }
    const std::uint64_t end = time_ + 1;
    for (std::size_t w : weight_index) {
      switch (draw_.below(10)) {
        case 0:
        case 1:
        case 2:  // the whole program
          break;
        case 3:
        case 4:
        case 5:
        case 6:  // loaded at the start, dropped after its last use
          out_[w].upper = 1 + draw_.below(end - 1);
          break;
        default:  // loaded at its first use, kept to the end
          out_[w].lower = draw_.below(end - 1);
          break;
      }
    }
    for (DsaBuffer& b : out_) {
      b.upper = std::min(b.upper, end);
      if (b.lower >= b.upper) b.upper = b.lower + 1;
    }
    return std::move(out_);
  }

 private:
  bool add(std::uint64_t lower, std::uint64_t upper, std::uint64_t size) {
    if (out_.size() >= n_) return false;
    out_.push_back({out_.size(), lower, std::max(upper, lower + 1), size, 1});
    return true;
  }

  std::uint64_t round64(std::uint64_t bytes) { return (std::max<std::uint64_t>(bytes, 1) + 63) / 64 * 64; }

  // An op's temporaries: scratch space, casts, reductions; most live one to three steps.
  void temporaries(std::uint64_t count) {
    for (std::uint64_t k = 0; k < count; ++k) {
      const std::uint64_t length = draw_.percent(85) ? draw_.between(1, 3) : draw_.between(4, 12);
      add(time_ + draw_.below(2), time_ + length + 1, temporary_size());
    }
  }

  // A tensor of the model: a multiple or fraction of the phase's width.
  std::uint64_t activation_size() {
    static constexpr std::uint64_t kNum[] = {1, 1, 1, 1, 2, 3, 4, 1, 1, 3, 8};
    static constexpr std::uint64_t kDen[] = {1, 2, 4, 8, 1, 1, 1, 1, 1, 2, 1};
    const std::size_t f = draw_.below(std::size(kNum));
    const std::uint64_t jitter = 90 + draw_.below(21);  // sequence lengths, padding
    return round64(width_ * kNum[f] / kDen[f] * jitter / 100);
  }

  std::uint64_t temporary_size() {
    const std::uint64_t r = draw_.below(100);
    if (r < 15) return 4 * draw_.between(1, 64);                  // scalars, shapes, flags
    if (r < 30) return round64(draw_.log_uniform(256, 1 << 20));  // small workspaces
    if (r < 97) return activation_size();
    return round64(width_ * draw_.between(8, 64));  // a large workspace (attention scores, im2col)
  }

  std::uint64_t weight_size() {
    if (draw_.percent(20)) return 4 * draw_.between(1, 1024);  // biases, norms
    return round64(draw_.log_uniform(1 << 16, std::uint64_t{1} << 28));
  }

  // Layers of a few ops each; a layer's output feeds the next layer and, through a residual
  // connection, sometimes the one after.
  void layer_stack(std::size_t goal) {
    std::vector<std::pair<std::size_t, std::uint64_t>> outputs;  // (buffer, layers left)
    while (out_.size() < goal) {
      const std::uint64_t ops = draw_.between(3, 8);
      for (std::uint64_t op = 0; op < ops; ++op, ++time_) temporaries(draw_.between(0, 3));
      for (auto& [buffer, left] : outputs) {
        if (--left == 0) out_[buffer].upper = time_ + 1;
      }
      std::erase_if(outputs, [](const auto& o) { return o.second == 0; });
      const std::size_t at = out_.size();
      if (!add(time_, kToEnd, activation_size())) break;
      outputs.emplace_back(at, draw_.percent(30) ? draw_.between(2, 4) : 1);
    }
    for (auto& [buffer, left] : outputs) out_[buffer].upper = time_ + 1;
  }

  // A forward pass keeps one to three activations per layer until the layer's backward step;
  // the backward pass makes gradients kept to the phase's optimizer step or used at once.
  void forward_backward(std::size_t goal) {
    const std::size_t start_count = out_.size();
    const std::size_t per_layer_guess = 12;
    const std::uint64_t layers =
        std::max<std::uint64_t>(2, std::min<std::uint64_t>(96, (goal - start_count) / (2 * per_layer_guess) + 1));
    while (out_.size() < goal) {
      std::vector<std::vector<std::size_t>> saved(layers);
      for (std::uint64_t l = 0; l < layers && out_.size() < goal; ++l) {
        for (std::uint64_t a = draw_.between(1, 3); a > 0; --a) {
          const std::size_t at = out_.size();
          if (!add(time_, kToEnd, activation_size())) break;
          saved[l].push_back(at);
        }
        const std::uint64_t ops = draw_.between(2, 5);
        for (std::uint64_t op = 0; op < ops; ++op, ++time_) temporaries(draw_.between(0, 2));
      }
      std::vector<std::size_t> gradients;
      for (std::uint64_t l = layers; l-- > 0;) {
        const std::uint64_t ops = draw_.between(2, 6);
        for (std::uint64_t op = 0; op < ops; ++op, ++time_) temporaries(draw_.between(0, 3));
        for (std::size_t a : saved[l]) out_[a].upper = time_;
        const std::size_t at = out_.size();
        if (draw_.percent(50) && add(time_, kToEnd, activation_size())) gradients.push_back(at);
      }
      time_ += 2;  // the optimizer step
      temporaries(draw_.between(1, 6));
      for (std::size_t g : gradients) out_[g].upper = time_;
      ++time_;
    }
  }

  // Free-form dataflow: each op makes one or two values used by a later op, mostly soon,
  // sometimes much later (lifetimes log-uniform), rarely in a later phase.
  void dataflow(std::size_t goal) {
    while (out_.size() < goal) {
      for (std::uint64_t k = draw_.between(1, 2); k > 0; --k) {
        const std::uint64_t r = draw_.below(100);
        std::uint64_t length = 0;
        if (r < 65) {
          length = draw_.between(1, 4);
        } else if (r < 97) {
          length = draw_.log_uniform(2, 2048);
        } else {
          length = draw_.log_uniform(2048, 1 << 20);  // cut at the program's end
        }
        if (!add(time_, time_ + length, draw_.percent(70) ? activation_size() : temporary_size())) {
          return;
        }
      }
      if (draw_.percent(30)) temporaries(1);
      ++time_;
    }
  }

  std::size_t n_;
  Draw draw_;
  std::vector<DsaBuffer> out_;
  std::uint64_t time_ = 1;
  std::uint64_t width_ = 1;
  std::uint64_t phase_start_ = 0;
  std::vector<std::size_t> pending_ends_;
};

// The training run of the earlier benchmark (bench/dsa_bench.cpp, seed 7), unchanged.
std::vector<DsaBuffer> training_run(std::size_t n, std::uint64_t seed) {
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
  for (std::size_t w = 0; w < weights; ++w) out[w].upper = time;
  return out;
}

}  // namespace

std::vector<DsaBuffer> generate_dsa_instance(const DsaGeneratorOptions& options) {
  if (options.buffers == 0) return {};
  switch (options.kind) {
    case DsaInstanceKind::Irregular:
      return IrregularProgram(options.buffers, options.seed).make();
    case DsaInstanceKind::Training:
      return training_run(options.buffers, options.seed);
  }
  return {};
}

std::optional<DsaInstanceKind> parse_dsa_instance_kind(std::string_view name) {
  if (name == "irregular") return DsaInstanceKind::Irregular;
  if (name == "training") return DsaInstanceKind::Training;
  return std::nullopt;
}

std::string dsa_instance_kind_name(DsaInstanceKind kind) {
  return kind == DsaInstanceKind::Irregular ? "irregular" : "training";
}

}  // namespace stalloc
