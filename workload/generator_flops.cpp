// The arithmetic of one training iteration on the traced rank, so that a generated workload has
// an iteration time to weigh the allocator's driver time against (docs/workloads.md, "Iteration
// time"). Matrix multiplications only, as Megatron-LM's model-FLOPs formula counts them
// (Narayanan et al., SC'21): elementwise work, norms and communication are left out, which makes
// iterations shorter and the allocator's share larger, the conservative side.
#include <cstdint>

#include "workload/generator.h"

namespace stalloc {

double flops_per_iteration(const GeneratorConfig& cfg, std::uint64_t seq) {
  const double h = static_cast<double>(cfg.hidden);
  const double s = static_cast<double>(seq);
  const double kv = static_cast<double>(cfg.kv_heads) / static_cast<double>(cfg.heads);
  // Forward FLOPs per token and layer: Q and O projections, K and V (narrower with grouped-query
  // attention), the attention scores and their product with V over the whole sequence.
  const double attention = 2.0 * h * h * (2.0 + 2.0 * kv) + 4.0 * s * h;
  auto mlp_flops = [&](std::uint64_t ffn) {
    const double f = static_cast<double>(ffn);
    return cfg.swiglu ? 6.0 * h * f : 4.0 * h * f;
  };
  const double mlp = cfg.experts == 0
                         ? mlp_flops(cfg.ffn)
                         : static_cast<double>(cfg.top_k + cfg.shared_experts) * mlp_flops(cfg.expert_ffn);
  const double layers_here = static_cast<double>(cfg.layers) / static_cast<double>(cfg.pp);
  double per_token = layers_here * (attention + mlp);
  // The output layer runs on the last pipeline stage.
  if (cfg.pipeline_rank + 1 == cfg.pp) per_token += 2.0 * h * static_cast<double>(cfg.vocab);
  // Backward is twice the forward; full recomputation runs the forward again.
  const double passes = cfg.recompute == RecomputeKind::Full ? 4.0 : 3.0;
  // Context parallelism: the rank runs s/cp of the tokens, each still attending over the
  // sequence (the 4 s h term keeps the whole s).
  const double tokens = static_cast<double>(microbatches_per_iteration(cfg) * cfg.micro_batch) * s /
                        static_cast<double>(cfg.cp);
  return passes * tokens * per_token / static_cast<double>(cfg.tp);
}

}  // namespace stalloc
