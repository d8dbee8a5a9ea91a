// A Mixture-of-Experts MLP as Megatron-core runs it by default: top-k router, all-to-all token
// dispatcher over the expert-parallel group, SequentialMLP (one small MLP per local expert,
// run one after the other), optional shared experts. Dropless routing: how many tokens each
// expert gets varies per micro-batch and iteration, so the per-expert activations (and, with
// expert parallelism, the received-token buffers) change size and are marked dynamic.
#include <numeric>

#include "workload/generator_model.h"
#include "workload/generator_random.h"

namespace stalloc::gen {

namespace {
constexpr std::uint64_t kBf16 = 2;
constexpr std::uint64_t kFp32 = 4;
constexpr std::uint64_t kInt64 = 8;
}  // namespace

Tensor ModelEmitter::moe_forward(MoeSaved& M, bool grad, std::int32_t layer) {
  auto done = [&](Tensor& t) {
    if (!grad) b_.free(t);
  };
  const std::uint64_t T = d_.tokens_local, k = cfg_.top_k, E = cfg_.experts, h = d_.h;
  const std::uint64_t local = params_.local_experts;
  const std::uint64_t fc1_width = (cfg_.swiglu ? 2 : 1) * cfg_.expert_ffn / d_.t;
  const std::uint64_t ffn_width = cfg_.expert_ffn / d_.t;
  const bool exchange = cfg_.ep > 1;  // tokens travel to the ranks that own their experts
  const std::vector<std::uint64_t> counts =
      expert_token_counts(cfg_, T * k * cfg_.ep, iteration_, static_cast<std::uint64_t>(b_.scope().microbatch),
                          static_cast<std::uint64_t>(layer));
  M.received = std::accumulate(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(local), std::uint64_t{0});
  const std::uint64_t R = M.received;

  // Router: logits, fp32 softmax (saved), top-k probabilities and expert indices.
  Tensor logits = b_.alloc(T * E * kBf16);
  M.scores = b_.alloc(T * E * kFp32);
  b_.free(logits);
  M.probs = b_.alloc(T * k * kFp32);
  M.indices = b_.alloc(T * k * kInt64);
  done(M.scores);
  b_.transient(E * kInt64);  // tokens per expert, for the load-balancing loss

  // Dispatch: tokens sorted by expert, exchanged with the expert-parallel group.
  M.sorted_indices = b_.alloc(T * k * kInt64);
  Tensor x = b_.alloc(T * k * h * kBf16);
  if (exchange) {
    b_.transient(local * cfg_.ep * kInt64);  // how many tokens go where
    Tensor received = b_.alloc(R * h * kBf16, true);
    b_.free(x);
    x = received;
    if (local > 1) {  // regroup what arrived from each rank by local expert
      Tensor sorted = b_.alloc(R * h * kBf16, true);
      b_.free(x);
      x = sorted;
    }
  }
  M.expert_input = x;

  // SequentialMLP: each expert's MLP on its slice of the tokens.
  Tensor out_local = b_.alloc(R * h * kBf16, exchange);
  M.experts.clear();
  for (std::uint64_t e = 0; e < local; ++e) {
    ExpertSaved ex;
    ex.tokens = counts[e];
    ex.fc1 = b_.alloc(ex.tokens * fc1_width * kBf16, true);
    ex.act = b_.alloc(ex.tokens * ffn_width * kBf16, true);
    done(ex.fc1);
    Tensor o = b_.alloc(ex.tokens * h * kBf16, true);
    done(ex.act);
    b_.free(o);  // copied into out_local
    M.experts.push_back(ex);
  }
  done(M.expert_input);

  // Combine: back to the owning ranks, weighted by the router probabilities, summed per token.
  Tensor y = out_local;
  if (exchange) {
    if (local > 1) {
      Tensor unsorted = b_.alloc(R * h * kBf16, true);
      b_.free(y);
      y = unsorted;
    }
    Tensor back = b_.alloc(T * k * h * kBf16);
    b_.free(y);
    y = back;
  }
  M.combined = y;
  Tensor weighted = b_.alloc(T * k * h * kBf16);
  Tensor routed = b_.alloc(T * h * kBf16);
  b_.free(weighted);
  done(M.combined);
  done(M.probs);
  done(M.indices);
  done(M.sorted_indices);

  if (cfg_.shared_experts == 0) return routed;
  const std::uint64_t shared_ffn = cfg_.shared_experts * cfg_.expert_ffn / d_.t;
  M.shared_fc1 = b_.alloc(T * (cfg_.swiglu ? 2 : 1) * shared_ffn * kBf16);
  M.shared_act = b_.alloc(T * shared_ffn * kBf16);
  done(M.shared_fc1);
  Tensor shared_out = b_.alloc(T * h * kBf16);
  done(M.shared_act);
  Tensor out = b_.alloc(T * h * kBf16);
  b_.free(routed);
  b_.free(shared_out);
  return out;
}

Tensor ModelEmitter::moe_backward(MoeSaved& M) {
  const std::uint64_t T = d_.tokens_local, k = cfg_.top_k, E = cfg_.experts, h = d_.h;
  const std::uint64_t local = params_.local_experts;
  const std::uint64_t fc1_width = (cfg_.swiglu ? 2 : 1) * cfg_.expert_ffn / d_.t;
  const std::uint64_t ffn_width = cfg_.expert_ffn / d_.t;
  const bool exchange = cfg_.ep > 1;
  const std::uint64_t R = M.received;

  Tensor d_shared = 0;
  if (cfg_.shared_experts > 0) {
    const std::uint64_t shared_ffn = cfg_.shared_experts * cfg_.expert_ffn / d_.t;
    Tensor d_act = b_.alloc(T * shared_ffn * kBf16);
    weight_grad(params_.shared_fc2_w, 0);
    b_.free(M.shared_act);
    Tensor d_fc1 = b_.alloc(T * (cfg_.swiglu ? 2 : 1) * shared_ffn * kBf16);
    b_.free(M.shared_fc1);
    b_.free(d_act);
    d_shared = b_.alloc(T * h * kBf16);
    weight_grad(params_.shared_fc1_w, 0);
    b_.free(d_fc1);
  }

  // Combine backwards: gather each token's gradient per assignment, split it between the
  // expert outputs and the router probabilities.
  Tensor d_weighted = b_.alloc(T * k * h * kBf16);
  Tensor g = b_.alloc(T * k * h * kBf16);
  Tensor d_probs_elem = b_.alloc(T * k * h * kBf16);
  Tensor d_probs = b_.alloc(T * k * kFp32);
  b_.free(d_probs_elem);
  b_.free(d_weighted);
  b_.free(M.combined);
  if (exchange) {
    Tensor back = b_.alloc(R * h * kBf16, true);
    b_.free(g);
    g = back;
    if (local > 1) {
      Tensor sorted = b_.alloc(R * h * kBf16, true);
      b_.free(g);
      g = sorted;
    }
  }

  // Experts in reverse order of their forward.
  std::vector<Tensor> d_inputs;
  for (std::uint64_t i = local; i-- > 0;) {
    ExpertSaved& ex = M.experts[i];
    Tensor d_act = b_.alloc(ex.tokens * ffn_width * kBf16, true);
    weight_grad(params_.expert_fc2_w, 0);
    b_.free(ex.act);
    Tensor d_fc1 = b_.alloc(ex.tokens * fc1_width * kBf16, true);
    b_.free(ex.fc1);
    b_.free(d_act);
    d_inputs.push_back(b_.alloc(ex.tokens * h * kBf16, true));
    weight_grad(params_.expert_fc1_w, 0);
    b_.free(d_fc1);
  }
  b_.free(g);
  Tensor d_x = b_.alloc(R * h * kBf16, exchange);  // the split of the expert input, backwards
  for (Tensor& t : d_inputs) b_.free(t);
  b_.free(M.expert_input);
  if (exchange) {
    if (local > 1) {
      Tensor unsorted = b_.alloc(R * h * kBf16, true);
      b_.free(d_x);
      d_x = unsorted;
    }
    Tensor back = b_.alloc(T * k * h * kBf16);
    b_.free(d_x);
    d_x = back;
  }
  Tensor d_routed = b_.alloc(T * h * kBf16);  // un-permuted: summed per token
  b_.free(d_x);
  b_.free(M.sorted_indices);

  // Router backwards: top-k scatter, softmax, logits, gating linear.
  Tensor d_scores = b_.alloc(T * E * kFp32);
  b_.free(d_probs);
  b_.free(M.indices);
  b_.free(M.probs);
  Tensor d_softmax = b_.alloc(T * E * kFp32);
  b_.free(M.scores);
  b_.free(d_scores);
  Tensor d_logits = b_.alloc(T * E * kBf16);
  b_.free(d_softmax);
  Tensor d_router_in = b_.alloc(T * h * kBf16);
  weight_grad(params_.router_w, 0);
  b_.free(d_logits);

  // The three gradients of the norm output accumulate into one in place.
  b_.free(d_shared);
  b_.free(d_router_in);
  return d_routed;
}

}  // namespace stalloc::gen
