// A transformer layer's forward and backward as Megatron-LM runs them under PyTorch autograd.
// The forward allocates what Korthikanti et al. 2022 ("Reducing Activation Recomputation in
// Large Transformer Models") count as saved for backward, s*b*h*(34 + 5*a*s/h) bytes per layer
// without parallelism (with the layer input, which the previous layer allocated), plus the
// temporaries freed inside the layer. The backward frees each saved tensor when the autograd
// node that saved it has run. docs/workloads.md has the table.
#include "workload/generator_model.h"

#include <algorithm>

namespace stalloc::gen {

namespace {
constexpr std::uint64_t kBf16 = 2;
constexpr std::uint64_t kFp32 = 4;
}  // namespace

Dims::Dims(const GeneratorConfig& cfg, std::uint64_t seq) {
  sp = cfg.sequence_parallel && cfg.tp > 1;
  cp = cfg.cp;
  s_full = seq;
  s = seq / cp;
  b = cfg.micro_batch;
  h = cfg.hidden;
  t = cfg.tp;
  tokens = s * b;
  tokens_local = sp ? tokens / t : tokens;
  heads_local = cfg.heads / t;
  kv_local = cfg.kv_heads / t;
  head_dim = cfg.hidden / cfg.heads;
  vocab_local = cfg.vocab / t;
  act_local = tokens_local * h * kBf16;
  act_full = tokens * h * kBf16;
  q = tokens * heads_local * head_dim * kBf16;
  kv = tokens * kv_local * head_dim * kBf16;
  qkv = q + 2 * kv;
  scores = b * heads_local * s * s * kBf16;
  attn_mask = b * heads_local * s * s;
  lse = b * heads_local * s * kFp32;
  const std::uint64_t ffn_local = cfg.ffn / t;
  fc1 = tokens * (cfg.swiglu ? 2 : 1) * ffn_local * kBf16;
  act = tokens * ffn_local * kBf16;
  hidden_mask = tokens_local * h;
  norm_stat = tokens_local * kFp32;
  logits = tokens * vocab_local * kBf16;
}

ParamSizes::ParamSizes(const GeneratorConfig& cfg) {
  const std::uint64_t h = cfg.hidden, t = cfg.tp;
  const std::uint64_t d = cfg.hidden / cfg.heads;
  const std::uint64_t qkv_out = (cfg.heads + 2 * cfg.kv_heads) * d / t;
  const std::uint64_t gate = cfg.swiglu ? 2 : 1;
  qkv_w = h * qkv_out;
  qkv_b = cfg.bias ? qkv_out : 0;
  proj_w = h * h / t;
  proj_b = cfg.bias ? h : 0;
  norm = h;
  norm_b = cfg.norm == NormKind::LayerNorm ? h : 0;
  if (cfg.experts == 0) {
    fc1_w = h * gate * cfg.ffn / t;
    fc1_b = cfg.bias ? gate * cfg.ffn / t : 0;
    fc2_w = cfg.ffn / t * h;
    fc2_b = cfg.bias ? h : 0;
  } else {
    local_experts = cfg.experts / cfg.ep;
    router_w = cfg.experts * h;
    expert_fc1_w = h * gate * cfg.expert_ffn / t;
    expert_fc2_w = cfg.expert_ffn / t * h;
    const std::uint64_t shared = cfg.shared_experts * cfg.expert_ffn / t;
    shared_fc1_w = h * gate * shared;
    shared_fc2_w = shared * h;
  }
  embedding = cfg.vocab / t * h;
  output = cfg.vocab / t * h;
}

std::vector<ParamTensor> ParamSizes::layer_tensors() const {
  const bool no_decay = false;
  std::vector<ParamTensor> out = {{norm, no_decay},  {norm_b, no_decay}, {qkv_w, true},
                                  {qkv_b, no_decay}, {proj_w, true},     {proj_b, no_decay},
                                  {norm, no_decay},  {norm_b, no_decay}};
  if (local_experts == 0) {
    out.insert(out.end(), {{fc1_w, true}, {fc1_b, no_decay}, {fc2_w, true}, {fc2_b, no_decay}});
  } else {
    out.push_back({router_w, true});
    for (std::uint64_t e = 0; e < local_experts; ++e) out.insert(out.end(), {{expert_fc1_w, true}, {expert_fc2_w, true}});
    out.insert(out.end(), {{shared_fc1_w, true}, {shared_fc2_w, true}});
  }
  std::erase_if(out, [](const ParamTensor& p) { return p.numel == 0; });
  return out;
}

void ModelEmitter::norm_forward(Tensor* out, Tensor* mean, Tensor* rstd) {
  *out = b_.alloc(d_.act_local);
  // native_layer_norm returns mean and rstd; RMSNorm keeps only rstd.
  if (cfg_.norm == NormKind::LayerNorm) *mean = b_.alloc(d_.norm_stat);
  *rstd = b_.alloc(d_.norm_stat);
}

void ModelEmitter::cublas_workspace() {
  const std::uint16_t thread = b_.scope().thread;
  if (cfg_.cublas_workspace == 0 ||
      std::find(cublas_threads_.begin(), cublas_threads_.end(), thread) != cublas_threads_.end()) {
    return;
  }
  cublas_threads_.push_back(thread);
  b_.alloc(cfg_.cublas_workspace);  // kept by PyTorch's handle pool, never freed
}

Tensor ModelEmitter::rotary_frequencies() {
  // With context parallelism the frequencies are computed for the whole sequence (s_full).
  const std::uint64_t s = d_.s_full, half = d_.head_dim / 2;
  Tensor positions = b_.alloc(s * kFp32);  // arange(s)
  Tensor shifted = b_.alloc(s * kFp32);    // + offset
  b_.free(positions);
  Tensor freqs = b_.alloc(s * half * kFp32);  // outer(positions, inv_freq)
  Tensor emb = b_.alloc(s * 2 * half * kFp32);  // cat((freqs, freqs), -1)
  b_.free(shifted);
  b_.free(freqs);
  if (d_.cp > 1 && cfg_.doc_max == 0) {
    // get_pos_emb_on_this_cp_rank: the rank's two chunks, picked with a 2-element index tensor.
    Tensor index = b_.alloc(2 * 8);
    Tensor local = b_.alloc(d_.s * 2 * half * kFp32);
    b_.free(index);
    b_.free(emb);
    return local;
  }
  return emb;
}

Tensor ModelEmitter::biased_linear_output(std::uint64_t bytes) {
  Tensor out = b_.alloc(bytes);
  if (!cfg_.bias) return out;
  Tensor sum = b_.alloc(bytes);
  b_.free(out);
  return sum;
}

void ModelEmitter::norm_weight_grads() {
  b_.transient(params_.norm * kBf16);
  b_.transient(params_.norm_b * kBf16);
}

void ModelEmitter::gather_input() {
  if (!d_.sp || d_.act_full <= gather_capacity_) return;
  // GlobalMemoryBuffer.get_tensor assigns the new buffer before the old one is dropped.
  Tensor grown = b_.alloc(d_.act_full);
  b_.free(gather_buffer_);
  gather_buffer_ = grown;
  gather_capacity_ = d_.act_full;
}

Tensor ModelEmitter::row_parallel_output() {
  Tensor full = b_.alloc(d_.act_full);
  if (!d_.sp) return full;
  Tensor scattered = b_.alloc(d_.act_local);
  b_.free(full);
  return scattered;
}

Tensor ModelEmitter::gather_grad(Tensor& g, bool owns_g) {
  if (!d_.sp) return 0;
  Tensor full = b_.alloc(d_.act_full);
  if (owns_g) b_.free(g);
  return full;
}

void ModelEmitter::weight_grad(std::uint64_t weight_elems, std::uint64_t bias_elems) {
  // Without gradient-accumulation fusion the bf16 weight gradient is materialised, then added
  // into the fp32 main_grad buffer by Megatron's hook and dropped.
  b_.transient(weight_elems * kBf16);
  b_.transient(bias_elems * kBf16);
}

Tensor ModelEmitter::column_parallel_backward(std::uint64_t weight, std::uint64_t bias) {
  Tensor d_in = b_.alloc(d_.act_full);
  if (!d_.sp) {  // all-reduced in place while the weight gradient is computed
    weight_grad(weight, bias);
    return d_in;
  }
  // LinearWithGradAccumulationAndAsyncCommunication.backward: re-gather the input for the
  // weight gradient, start the reduce-scatter of the input gradient into a new tensor, compute
  // the weight gradient, return; the full input gradient dies with the function's frame.
  gather_input();
  Tensor scattered = b_.alloc(d_.act_local);
  weight_grad(weight, bias);
  b_.free(d_in);
  return scattered;
}

bool ModelEmitter::checkpoints_core_attention() const {
  return cfg_.recompute == RecomputeKind::Selective && (!cfg_.flash_attention || cfg_.cp > 1);
}

AttentionCore ModelEmitter::attention_forward(bool grad) {
  if (d_.cp > 1) return cp_attention_forward(grad);
  AttentionCore c;
  auto done = [&](Tensor& x) {
    if (!grad) b_.free(x);
  };
  if (cfg_.flash_attention) {
    // Megatron's ParallelAttention with --use-flash-attn: rearrange Q, K, V from [s, b, ...] to
    // contiguous [b, s, ...] copies, run flash_attn (which saves them, its output and the
    // log-sum-exp), then rearrange the output back into a contiguous [s, b, h/t] context.
    c.q = b_.alloc(d_.q);
    c.k = b_.alloc(d_.kv);
    c.v = b_.alloc(d_.kv);
    c.flash_out = b_.alloc(d_.q);
    c.lse = b_.alloc(d_.lse);
    c.out = b_.alloc(d_.q);
    done(c.q);
    done(c.k);
    done(c.v);
    done(c.flash_out);
    done(c.lse);
    return c;
  }
  Tensor scores = b_.alloc(d_.scores);  // baddbmm(Q, K^T)
  c.probs = b_.alloc(d_.scores);        // fused scale-mask-softmax saves its output only
  b_.free(scores);
  if (cfg_.dropout) {
    c.mask = b_.alloc(d_.attn_mask);
    c.probs_dropped = b_.alloc(d_.scores);
    done(c.mask);
    done(c.probs);
  }
  Tensor context = b_.alloc(d_.q);  // bmm(probs, V): [b*a/t, s, d]
  if (cfg_.dropout) done(c.probs_dropped);
  else done(c.probs);
  c.out = b_.alloc(d_.q);  // permuted to [s, b, h/t] and made contiguous
  b_.free(context);
  return c;
}

Tensor ModelEmitter::attention_backward(AttentionCore& c, LayerSaved& L, Tensor& d_out, bool free_out) {
  Tensor dq = 0, dk = 0, dv = 0;
  if (d_.cp > 1) {
    // dK and dV are views of one ring buffer: it dies with the last of them, after the cat.
    cp_core_backward(c, d_out, free_out, &dq, &dv);
  } else if (cfg_.flash_attention) {
    // The context gradient reaches flash_attn as a permuted view: it makes it contiguous.
    Tensor d_flash_out = b_.alloc(d_.q);
    b_.free(d_out);
    if (free_out) b_.free(c.out);
    dq = b_.alloc(d_.q);
    dk = b_.alloc(d_.kv);
    dv = b_.alloc(d_.kv);
    Tensor dq_accum = b_.alloc(d_.q / kBf16 * kFp32);
    Tensor softmax_d = b_.alloc(d_.lse);
    if (d_.kv_local < d_.heads_local) {
      // Grouped-query attention: gradients are computed per query head, then summed per group.
      Tensor dk_expanded = b_.alloc(d_.q);
      Tensor dv_expanded = b_.alloc(d_.q);
      b_.free(dk_expanded);
      b_.free(dv_expanded);
    }
    b_.free(dq_accum);
    b_.free(softmax_d);
    b_.free(d_flash_out);
    b_.free(c.q);
    b_.free(c.k);
    b_.free(c.v);
    b_.free(c.flash_out);
    b_.free(c.lse);
  } else {
    Tensor d_dropped = b_.alloc(d_.scores);  // bmm backward: grad of the probabilities
    dv = b_.alloc(d_.kv);
    b_.free(d_out);
    Tensor d_probs = d_dropped;
    if (cfg_.dropout) {
      b_.free(c.probs_dropped);
      d_probs = b_.alloc(d_.scores);
      b_.free(c.mask);
      b_.free(d_dropped);
    }
    b_.free(c.probs);  // the fused softmax backward works in place on its gradient
    dq = b_.alloc(d_.q);
    dk = b_.alloc(d_.kv);
    b_.free(d_probs);
    if (free_out) b_.free(c.out);
  }
  b_.free(L.q_rot);
  b_.free(L.k_rot);
  b_.free(L.qkv);
  if (cfg_.rope) {  // the rotary embedding's backward rotates the gradients into new tensors
    Tensor dq_plain = b_.alloc(d_.q);
    b_.free(dq);
    dq = dq_plain;
    Tensor dk_plain = b_.alloc(d_.kv);
    b_.free(dk);
    dk = dk_plain;
  }
  Tensor d_qkv = b_.alloc(d_.qkv);  // the split of Q, K, V backwards: one concatenated gradient
  b_.free(dq);
  b_.free(dk);
  b_.free(dv);
  return d_qkv;
}

LayerSaved ModelEmitter::layer_forward(Tensor x, bool owns_input, std::int32_t layer, bool grad,
                                       Tensor* out) {
  b_.scope().layer = layer;
  LayerSaved L;
  L.layer = layer;
  L.input = x;
  L.owns_input = owns_input;
  auto done = [&](Tensor& t) {
    if (!grad) b_.free(t);
  };

  norm_forward(&L.ln1, &L.ln1_mean, &L.ln1_rstd);
  done(L.ln1_mean);
  done(L.ln1_rstd);
  gather_input();
  cublas_workspace();
  L.qkv = biased_linear_output(d_.qkv);
  if (cfg_.rope) {  // rotary embedding of Q and K: new tensors, V stays a view of the QKV output
    L.q_rot = b_.alloc(d_.q);
    L.k_rot = b_.alloc(d_.kv);
  }

  // The legacy model checkpoints only the non-flash core attention under selective recompute;
  // Megatron-core (context parallelism) any core attention, whose checkpoint saves Q, K, V.
  const bool selective = checkpoints_core_attention();
  L.core = attention_forward(grad && !selective);
  Tensor proj = row_parallel_output();
  // Attention.forward returns: without autograd its locals (Q, K, V, the context) die here;
  // with flash attention nothing saved the [s, b] Q, K, V (flash keeps its own copies).
  done(L.core.out);
  if (cfg_.flash_attention && !selective) {
    b_.free(L.q_rot);
    b_.free(L.k_rot);
    b_.free(L.qkv);
  } else {
    done(L.q_rot);
    done(L.k_rot);
    done(L.qkv);
  }

  // Fused bias-dropout-add: the dropout mask and the residual sum.
  if (cfg_.dropout) {
    L.mask1 = b_.alloc(d_.hidden_mask);
    done(L.mask1);
  }
  L.res1 = b_.alloc(d_.act_local);
  b_.free(proj);

  norm_forward(&L.ln2, &L.ln2_mean, &L.ln2_rstd);
  done(L.ln2_mean);
  done(L.ln2_rstd);
  Tensor mlp_out = 0;
  if (cfg_.experts > 0) {
    mlp_out = moe_forward(L.moe, grad, layer);
  } else {
    gather_input();
    if (cfg_.swiglu) {
      // fc1 skips its bias add, ParallelMLP adds it as a new tensor, then silu(x0) * x1 on the
      // two halves (views): silu's input keeps the whole sum alive, the product saves silu(x0).
      L.fc1 = biased_linear_output(d_.fc1);
      L.silu = b_.alloc(d_.act);
      L.act = b_.alloc(d_.act);
      done(L.silu);
    } else {  // the fused bias-GeLU takes the GEMM output and the bias
      L.fc1 = b_.alloc(d_.fc1);
      L.act = b_.alloc(d_.act);
    }
    done(L.fc1);
    mlp_out = row_parallel_output();
    done(L.act);
  }
  if (cfg_.dropout) {
    L.mask2 = b_.alloc(d_.hidden_mask);
    done(L.mask2);
  }
  *out = b_.alloc(d_.act_local);
  b_.free(mlp_out);
  // TransformerLayer.forward returns: the norm outputs were locals of its frame.
  done(L.res1);
  done(L.ln1);
  done(L.ln2);
  return L;
}

Tensor ModelEmitter::layer_backward(LayerSaved& L, Tensor dy, bool owns_dy) {
  b_.scope().layer = L.layer;
  cublas_workspace();
  // Second bias-dropout-add: the residual path passes dy on unchanged, the dropout path
  // multiplies it by the mask.
  Tensor d_mlp = dy;
  bool owns_d_mlp = false;
  if (cfg_.dropout) {
    d_mlp = b_.alloc(d_.act_local);
    owns_d_mlp = true;
    b_.free(L.mask2);
  }
  Tensor d_ln2 = 0;
  if (cfg_.experts > 0) {
    d_ln2 = moe_backward(L.moe);
    b_.free(L.ln2);  // saved by the router and the shared experts
    if (owns_d_mlp) b_.free(d_mlp);
  } else {
    Tensor g_full = gather_grad(d_mlp, owns_d_mlp);
    Tensor d_act = b_.alloc(d_.act);
    weight_grad(params_.fc2_w, params_.fc2_b);
    b_.free(L.act);
    if (g_full) b_.free(g_full);
    else if (owns_d_mlp) b_.free(d_mlp);
    Tensor d_fc1 = 0;
    if (cfg_.swiglu) {
      // The product's backward (d_act * x1, d_act * silu), silu's backward, then the chunk's
      // backward concatenates the two halves' gradients.
      Tensor d_silu = b_.alloc(d_.act);
      Tensor d_x1 = b_.alloc(d_.act);
      b_.free(L.silu);
      b_.free(d_act);
      Tensor d_x0 = b_.alloc(d_.act);
      b_.free(d_silu);
      d_fc1 = b_.alloc(d_.fc1);
      b_.free(d_x0);
      b_.free(d_x1);
      b_.free(L.fc1);
    } else {
      d_fc1 = b_.alloc(d_.fc1);
      b_.free(L.fc1);
      b_.free(d_act);
    }
    d_ln2 = column_parallel_backward(params_.fc1_w, params_.fc1_b);
    b_.free(L.ln2);
    b_.free(d_fc1);
  }
  Tensor d_res1 = b_.alloc(d_.act_local);
  norm_weight_grads();
  b_.free(L.ln2_mean);
  b_.free(L.ln2_rstd);
  b_.free(L.res1);
  b_.free(d_ln2);
  if (owns_dy) b_.free(dy);  // accumulated into d_res1 in place

  Tensor d_proj = d_res1;
  bool owns_d_proj = false;
  if (cfg_.dropout) {
    d_proj = b_.alloc(d_.act_local);
    owns_d_proj = true;
    b_.free(L.mask1);
  }
  Tensor g_full = gather_grad(d_proj, owns_d_proj);
  Tensor d_ctx = b_.alloc(d_.q);
  weight_grad(params_.proj_w, params_.proj_b);
  if (g_full) b_.free(g_full);
  else if (owns_d_proj) b_.free(d_proj);

  Tensor d_qkv = 0;
  if (checkpoints_core_attention()) {
    // The checkpointed attention core runs again with autograd on, then its backward.
    b_.free(L.core.out);
    AttentionCore again = attention_forward(true);
    d_qkv = attention_backward(again, L, d_ctx, cfg_.flash_attention);
    b_.free(again.out);
  } else {
    if (!cfg_.flash_attention) b_.free(L.core.out);
    d_qkv = attention_backward(L.core, L, d_ctx, true);
  }

  Tensor d_ln1 = column_parallel_backward(params_.qkv_w, params_.qkv_b);
  b_.free(L.ln1);
  b_.free(d_qkv);
  Tensor dx = b_.alloc(d_.act_local);
  norm_weight_grads();
  b_.free(L.ln1_mean);
  b_.free(L.ln1_rstd);
  if (L.owns_input) b_.free(L.input);
  b_.free(d_ln1);
  b_.free(d_res1);  // accumulated into dx in place
  return dx;
}

}  // namespace stalloc::gen
