// A pipeline stage's forward and backward for one micro-batch: the batch tensors, the embedding
// (first stage), the model chunk's layers (checkpointed under full recompute), the output layer
// and vocabulary-parallel cross entropy (last stage); plus what lives for the whole run (weights,
// gradient buffers, optimizer state) and the optimizer step. The persistent state follows
// Megatron-core's DDP and distributed optimizer tensor by tensor: per-parameter (shard) main
// parameters, and Adam moments made lazily at the first step, while iteration 0's activations
// sit cached in the allocator, where they can split a caching allocator's segments for good.
#include "workload/generator_model.h"

#include <algorithm>
#include <numeric>

#include "workload/generator_random.h"

namespace stalloc::gen {

namespace {
constexpr std::uint64_t kBf16 = 2;
constexpr std::uint64_t kFp32 = 4;
constexpr std::uint64_t kInt64 = 8;
}  // namespace

ModelEmitter::ModelEmitter(const GeneratorConfig& cfg, TensorBuilder& builder)
    : cfg_(cfg), b_(builder), params_(cfg), layers_per_chunk_(cfg.layers / (cfg.pp * cfg.vpp)) {}

bool ModelEmitter::first_stage(std::uint64_t chunk) const {
  return chunk == 0 && cfg_.pipeline_rank == 0;
}

bool ModelEmitter::last_stage(std::uint64_t chunk) const {
  return chunk == cfg_.vpp - 1 && cfg_.pipeline_rank == cfg_.pp - 1;
}

std::int32_t ModelEmitter::layer_offset(std::uint64_t chunk) const {
  return static_cast<std::int32_t>((chunk * cfg_.pp + cfg_.pipeline_rank) * layers_per_chunk_);
}

void ModelEmitter::begin_iteration(std::uint32_t iteration, std::uint64_t seq) {
  iteration_ = iteration;
  b_.set_iteration(iteration);
  d_ = Dims(cfg_, seq);
}

void ModelEmitter::persistent_allocations() {
  ScopeGuard guard(b_, Scope{Phase::Other, -1, -1, 0});
  // Model construction: every chunk's parameters, one bf16 tensor each.
  std::vector<std::vector<Tensor>> weights(cfg_.vpp);
  std::vector<std::vector<ParamTensor>> params(cfg_.vpp);
  for (std::uint64_t c = 0; c < cfg_.vpp; ++c) {
    auto add = [&](ParamTensor p) {
      if (p.numel == 0) return;
      weights[c].push_back(b_.alloc(p.numel * kBf16));
      params[c].push_back(p);
    };
    b_.scope().layer = -1;
    if (first_stage(c)) add({params_.embedding, true});
    for (std::uint64_t i = 0; i < layers_per_chunk_; ++i) {
      b_.scope().layer = layer_offset(c) + static_cast<std::int32_t>(i);
      for (const ParamTensor& p : params_.layer_tensors()) add(p);
    }
    b_.scope().layer = -1;
    if (last_stage(c)) {
      add({params_.norm, false});
      add({params_.norm_b, false});
      add({params_.output, true});
    }
  }
  b_.scope().layer = -1;
  // Megatron wraps each chunk in its own DDP, one after the other.
  std::vector<ParamTensor> optimizer_params;
  for (std::uint64_t c = 0; c < cfg_.vpp; ++c) {
    std::vector<ParamTensor> chunk = ddp_buffers(weights[c], params[c]);
    optimizer_params.insert(optimizer_params.end(), chunk.begin(), chunk.end());
  }
  b_.alloc(sizeof(std::int32_t));  // FusedAdam's constructor: its overflow flag
  // _get_param_groups: a weight-decay group and a no-decay group, ordered by the first
  // parameter of each kind in the model; the optimizer walks group by group.
  const bool first_group_decays = params.front().empty() || params.front().front().decay;
  std::stable_partition(optimizer_params.begin(), optimizer_params.end(),
                        [&](const ParamTensor& p) { return p.decay == first_group_decays; });
  optimizer_numels_.clear();
  for (const ParamTensor& p : optimizer_params) optimizer_numels_.push_back(p.numel);
  // fp32 main parameters: `param.detach().clone().float()` (the distributed optimizer clones
  // the shard), so a bf16 copy lives until its fp32 cast exists.
  for (std::uint64_t n : optimizer_numels_) {
    Tensor copy = b_.alloc(n * kBf16);
    b_.alloc(n * kFp32);
    b_.free(copy);
  }
  if (!cfg_.lazy_adam_state) adam_moments();
}

std::vector<ParamTensor> ModelEmitter::ddp_buffers(std::vector<Tensor>& weights,
                                                   const std::vector<ParamTensor>& params) {
  // _ParamAndGradBuffer lays the parameters out in reverse (the order backward produces their
  // gradients). For the distributed optimizer each parameter starts 64-element aligned and each
  // bucket ends padded to lcm(dp, 128) elements, so that every rank owns 1/dp of it.
  const bool sharded = cfg_.distributed_optimizer;
  auto round_up = [](std::uint64_t n, std::uint64_t m) { return (n + m - 1) / m * m; };
  // Megatron-core shards over the data-parallel group with context parallelism (dp * cp ranks
  // hold the same parameters).
  const std::uint64_t shard_ranks = cfg_.dp * cfg_.cp;
  const std::uint64_t bucket_pad = sharded ? std::lcm(shard_ranks, std::uint64_t{128}) : 1;
  std::vector<std::uint64_t> start(params.size(), 0);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> buckets;  // [begin, end) in elements
  std::uint64_t end = 0, bucket_begin = 0;
  for (std::size_t i = params.size(); i-- > 0;) {
    if (sharded) end = round_up(end, 64);
    start[i] = end;
    end += params[i].numel;
    if (cfg_.grad_bucket_elems > 0 && end - bucket_begin >= cfg_.grad_bucket_elems) {
      end = round_up(end, bucket_pad);
      buckets.emplace_back(bucket_begin, end);
      bucket_begin = end;
    }
  }
  if (end > bucket_begin) {
    end = round_up(end, bucket_pad);
    buckets.emplace_back(bucket_begin, end);
  }
  // With the distributed optimizer the contiguous bf16 parameter buffer comes first and every
  // parameter moves into it (its own tensor is freed); then the fp32 main_grad buffer (Megatron
  // accumulates and reduces bf16 gradients in fp32).
  if (sharded) b_.alloc(end * kBf16);
  b_.alloc(end * kFp32);
  if (!sharded) return params;
  for (std::size_t i = weights.size(); i-- > 0;) b_.free(weights[i]);
  // Data-parallel rank 0 owns the first 1/dp of every bucket: its optimizer parameters are the
  // pieces of the parameters that intersect it, in buffer order.
  std::vector<ParamTensor> shards;
  for (std::size_t i = params.size(); i-- > 0;) {
    for (const auto& [begin, bucket_end] : buckets) {
      const std::uint64_t owned_end = begin + (bucket_end - begin) / shard_ranks;
      const std::uint64_t lo = std::max(begin, start[i]);
      const std::uint64_t hi = std::min(owned_end, start[i] + params[i].numel);
      if (hi > lo) shards.push_back({hi - lo, params[i].decay});
    }
  }
  return shards;
}

void ModelEmitter::adam_moments() {
  for (std::uint64_t n : optimizer_numels_) {
    b_.alloc(n * kFp32);  // exp_avg
    b_.alloc(n * kFp32);  // exp_avg_sq
  }
}

Tensor ModelEmitter::embedding_forward(StageState& st) {
  b_.scope().layer = -1;
  EmbeddingSaved& E = st.embedding;
  if (cfg_.tp > 1) {  // token ids outside this rank's vocabulary slice are masked
    E.input_mask = b_.alloc(d_.tokens);
    E.masked_ids = b_.alloc(d_.tokens * kInt64);
  }
  Tensor looked_up = b_.alloc(d_.tokens * d_.h * kBf16);  // [b, s, h]
  Tensor x = b_.alloc(d_.act_full);                        // transposed to [s, b, h]
  b_.free(looked_up);
  if (d_.sp) {
    Tensor scattered = b_.alloc(d_.act_local);
    b_.free(x);
    x = scattered;
  }
  if (cfg_.dropout) {
    E.mask = b_.alloc(d_.hidden_mask);
    Tensor dropped = b_.alloc(d_.act_local);
    b_.free(x);
    x = dropped;
  }
  return x;
}

void ModelEmitter::embedding_backward(StageState& st, Tensor dx) {
  b_.scope().layer = -1;
  EmbeddingSaved& E = st.embedding;
  Tensor g = dx;
  if (cfg_.dropout) {
    Tensor t = b_.alloc(d_.act_local);
    b_.free(E.mask);
    b_.free(g);
    g = t;
  }
  if (d_.sp) {
    Tensor t = b_.alloc(d_.act_full);
    b_.free(g);
    g = t;
  }
  if (cfg_.tp > 1) {
    Tensor t = b_.alloc(d_.tokens * d_.h * kBf16);
    b_.free(E.input_mask);
    b_.free(g);
    g = t;
  }
  // embedding_dense_backward sorts the indices, then sums the rows per vocabulary entry.
  Tensor sorted = b_.alloc(d_.tokens * kInt64);
  Tensor order = b_.alloc(d_.tokens * kInt64);
  Tensor grad_weight = b_.alloc(params_.embedding * kBf16);
  b_.free(sorted);
  b_.free(order);
  b_.free(g);
  if (cfg_.tp > 1) b_.free(E.masked_ids);
  else b_.free(st.tokens);
  b_.free(grad_weight);  // added into main_grad
}

void ModelEmitter::head_forward(StageState& st, Tensor x) {
  b_.scope().layer = -1;
  HeadSaved& H = st.head;
  H.input = x;
  norm_forward(&H.ln, &H.ln_mean, &H.ln_rstd);
  gather_input();
  cublas_workspace();
  Tensor logits = b_.alloc(d_.logits);
  H.logits32 = b_.alloc(d_.logits / kBf16 * kFp32);  // cross entropy in fp32; becomes the softmax
  Tensor logits_max = b_.alloc(d_.tokens * kFp32);
  H.target_mask = b_.alloc(d_.tokens);
  H.masked_target = b_.alloc(d_.tokens * kInt64);
  Tensor predicted = b_.alloc(d_.tokens * kFp32);
  Tensor sum_exp = b_.alloc(d_.tokens * kFp32);
  Tensor loss = b_.alloc(d_.tokens * kFp32);
  b_.free(logits_max);
  b_.free(predicted);
  b_.free(sum_exp);
  b_.free(logits);
  // loss_func: per-token losses [b, s], masked mean.
  H.losses = b_.alloc(d_.tokens * kFp32);
  b_.free(loss);
  Tensor masked = b_.alloc(d_.tokens * kFp32);
  Tensor numerator = b_.alloc(kFp32);
  b_.free(masked);
  H.denominator = b_.alloc(kFp32);
  Tensor mean = b_.alloc(kFp32);
  b_.free(numerator);
  st.reported_loss = b_.alloc(kFp32);
  st.output = b_.alloc(kFp32);  // divided by the number of micro-batches
  b_.free(mean);
}

Tensor ModelEmitter::head_backward(StageState& st) {
  b_.scope().layer = -1;
  HeadSaved& H = st.head;
  cublas_workspace();
  Tensor d_numerator = b_.alloc(kFp32);
  b_.free(H.denominator);
  Tensor d_losses = b_.alloc(d_.tokens * kFp32);
  b_.free(d_numerator);
  b_.free(st.loss_mask);
  b_.free(H.losses);
  // The cross-entropy backward turns the saved softmax into the gradient in place.
  b_.transient(d_.tokens * kInt64);
  b_.transient(d_.tokens * kFp32);
  b_.free(H.target_mask);
  b_.free(H.masked_target);
  b_.free(d_losses);
  Tensor d_logits = b_.alloc(d_.logits);
  b_.free(H.logits32);
  Tensor d_ln = column_parallel_backward(params_.output, 0);
  b_.free(H.ln);
  b_.free(d_logits);
  Tensor dx = b_.alloc(d_.act_local);
  norm_weight_grads();
  b_.free(H.ln_mean);
  b_.free(H.ln_rstd);
  b_.free(H.input);
  b_.free(d_ln);
  return dx;
}

StageState ModelEmitter::forward_step(std::uint64_t chunk, std::uint64_t microbatch, Tensor input) {
  ScopeGuard guard(b_, Scope{Phase::Forward, static_cast<std::int32_t>(microbatch), -1, 0});
  StageState st;
  st.chunk = chunk;
  st.microbatch = microbatch;
  const bool first = first_stage(chunk), last = last_stage(chunk);
  // get_batch: what this stage needs of tokens, labels, loss_mask, attention_mask, position_ids.
  Tensor labels = 0, position_ids = 0;
  docs_ = gen::document_count(cfg_, d_.s_full, iteration_, microbatch);
  st.docs = docs_;
  if (d_.cp > 1 || cfg_.doc_max > 0) {
    load_batch_cp(st, first, last, &labels, &position_ids);
  } else {
    if (first) st.tokens = b_.alloc(d_.tokens * kInt64);
    if (last) {
      labels = b_.alloc(d_.tokens * kInt64);
      st.loss_mask = b_.alloc(d_.tokens * kFp32);
    }
    if ((first || last) && (cfg_.attention_mask_in_dataloader || !cfg_.flash_attention)) {
      st.attention_mask = b_.alloc(d_.b * d_.s * d_.s);
    }
    if (first) position_ids = b_.alloc(d_.tokens * kInt64);
  }

  Tensor x = input;
  bool owned = false;
  if (first) {
    x = embedding_forward(st);
    owned = true;
  }
  b_.scope().layer = -1;
  if (cfg_.rope) st.rotary = rotary_frequencies();
  const bool checkpointed = cfg_.recompute == RecomputeKind::Full;
  for (std::uint64_t i = 0; i < layers_per_chunk_; ++i) {
    Tensor out = 0;
    st.layers.push_back(
        layer_forward(x, owned, layer_offset(chunk) + static_cast<std::int32_t>(i), !checkpointed, &out));
    x = out;
    owned = true;
  }
  if (last) head_forward(st, x);
  else st.output = x;
  b_.scope().layer = -1;
  // forward_step returns: batch tensors autograd did not save are dropped.
  b_.free(labels);
  // CheckpointFunction saves its arguments, the mask among them, until the layer's backward.
  if (cfg_.recompute != RecomputeKind::Full) b_.free(st.attention_mask);
  b_.free(position_ids);
  if (cfg_.tp > 1) b_.free(st.tokens);
  return st;
}

Tensor ModelEmitter::backward_step(StageState& st, Tensor grad_output) {
  ScopeGuard guard(b_, Scope{Phase::Backward, static_cast<std::int32_t>(st.microbatch), -1, 1});
  docs_ = st.docs;  // a recomputed layer's attention sees its micro-batch's documents
  Tensor dy = grad_output;
  bool owns_dy = false;
  Tensor seed_grad = 0;
  if (last_stage(st.chunk)) {
    b_.scope().thread = 0;  // custom_backward makes the loss gradient before entering autograd
    seed_grad = b_.alloc(kFp32);
    b_.scope().thread = 1;
    dy = head_backward(st);
    owns_dy = true;
  }
  for (std::size_t i = st.layers.size(); i-- > 0;) {
    LayerSaved& L = st.layers[i];
    if (cfg_.recompute == RecomputeKind::Full) {
      // CheckpointFunction.backward: the layer's forward again, with autograd, then its backward.
      Tensor out = 0;
      LayerSaved again = layer_forward(L.input, L.owns_input, L.layer, true, &out);
      dy = layer_backward(again, dy, owns_dy);
      b_.free(out);
    } else {
      dy = layer_backward(L, dy, owns_dy);
    }
    owns_dy = true;
  }
  b_.scope().layer = -1;
  if (first_stage(st.chunk)) {
    embedding_backward(st, dy);
    dy = 0;
  }
  b_.free(st.rotary);
  b_.free(st.attention_mask);
  b_.free(st.cu_seqlens);  // the step's graph, which every layer's attention saved them in, is gone
  b_.free(st.cu_seqlens_padded);
  b_.scope().thread = 0;
  b_.free(seed_grad);
  return dy;
}

void ModelEmitter::optimizer_step() {
  ScopeGuard guard(b_, Scope{Phase::Optimizer, -1, -1, 0});
  // Gradients are reduced in place in the main_grad buffers, FusedAdam updates in place and the
  // distributed optimizer all-gathers into the contiguous parameter buffer: what remains are
  // the small tensors of the gradient norm and clipping.
  Tensor overflow = b_.alloc(sizeof(std::int32_t));
  // Apex's multi_tensor_l2norm: zeros(320) fp32 partial sums per block, then the [1] result.
  Tensor partials = b_.alloc(320 * kFp32);
  Tensor norm = b_.alloc(kFp32);
  b_.free(partials);
  Tensor squared = b_.alloc(kFp32);
  b_.free(norm);
  b_.free(overflow);
  b_.free(squared);
  b_.transient(sizeof(std::int32_t));  // multi_tensor_scale's overflow flag for clipping
  // FusedAdam.step initialises a parameter's state the first time it sees it.
  if (cfg_.lazy_adam_state && iteration_ == 0) adam_moments();
}

}  // namespace stalloc::gen
