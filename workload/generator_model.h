// The tensors one pipeline rank allocates and frees while it runs a Megatron-LM decoder-only
// transformer: the forward and backward of each model chunk for one micro-batch, in the order
// PyTorch autograd issues them. Sizes and lifetimes are tabulated in docs/workloads.md; the
// pipeline schedule around these steps lives in generator.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "workload/generator.h"
#include "workload/generator_builder.h"

namespace stalloc::gen {

// Byte sizes of one micro-batch's tensors at one sequence length, on this rank.
struct Dims {
  Dims() = default;
  Dims(const GeneratorConfig& cfg, std::uint64_t seq);

  bool sp = false;  // sequence parallelism in effect (tp > 1)
  // s is this context-parallel rank's share of the sequence, s_full / cp (s_full with cp 1).
  std::uint64_t s = 0, b = 0, h = 0, t = 1, cp = 1, s_full = 0;
  std::uint64_t tokens = 0;        // s*b
  std::uint64_t tokens_local = 0;  // s*b/t under sequence parallelism, else s*b
  std::uint64_t heads_local = 0, kv_local = 0, head_dim = 0, vocab_local = 0;

  std::uint64_t act_local = 0;    // [s(/t), b, h] bf16: layer inputs/outputs, norm outputs
  std::uint64_t act_full = 0;     // [s, b, h] bf16: gathered inputs, partial linear outputs
  std::uint64_t q = 0;            // [s, b, a/t, d] bf16: queries, attention output
  std::uint64_t kv = 0;           // [s, b, g/t, d] bf16: keys or values
  std::uint64_t qkv = 0;          // fused QKV projection output
  std::uint64_t scores = 0;       // [b, a/t, s, s] bf16
  std::uint64_t attn_mask = 0;    // [b, a/t, s, s] bool dropout mask
  std::uint64_t lse = 0;          // [b, a/t, s] fp32 softmax statistics (flash attention)
  std::uint64_t fc1 = 0;          // [s, b, ffn'/t] bf16, ffn' = 2*ffn with SwiGLU
  std::uint64_t act = 0;          // [s, b, ffn/t] bf16
  std::uint64_t hidden_mask = 0;  // [s(/t), b, h] bool dropout mask
  std::uint64_t norm_stat = 0;    // [s(/t), b] fp32 mean or rstd
  std::uint64_t logits = 0;       // [s, b, V/t] bf16
};

// One parameter tensor: its elements, and whether the optimizer applies weight decay to it
// (Megatron's _get_param_groups exempts biases and 1-D tensors such as norm weights).
struct ParamTensor {
  std::uint64_t numel = 0;
  bool decay = true;
};

// Parameter sizes of this rank, in elements.
struct ParamSizes {
  explicit ParamSizes(const GeneratorConfig& cfg);
  std::uint64_t qkv_w = 0, qkv_b = 0, proj_w = 0, proj_b = 0, norm = 0, norm_b = 0;
  std::uint64_t fc1_w = 0, fc1_b = 0, fc2_w = 0, fc2_b = 0;
  std::uint64_t router_w = 0, expert_fc1_w = 0, expert_fc2_w = 0, shared_fc1_w = 0, shared_fc2_w = 0;
  std::uint64_t local_experts = 0;
  std::uint64_t embedding = 0, output = 0;
  // Every parameter tensor of one transformer layer, in model construction order.
  std::vector<ParamTensor> layer_tensors() const;
};

struct AttentionCore {
  Tensor probs = 0, mask = 0, probs_dropped = 0, lse = 0;
  // Flash attention: Q, K, V copied to [b, s, heads, d] and the kernel's output in that layout.
  Tensor q = 0, k = 0, v = 0, flash_out = 0;
  Tensor out = 0;  // the context [s, b, a/t, d]: input of the output projection
  // Context parallelism: the last ring buffer (K and V as they came around), saved for the
  // backward; small saved tensors (the flash kernels' RNG states, packed: per-step cu_seqlens).
  Tensor kv = 0;
  std::vector<Tensor> small;
};

struct ExpertSaved {
  std::uint64_t tokens = 0;
  Tensor fc1 = 0, act = 0;
};

struct MoeSaved {
  Tensor scores = 0, probs = 0, indices = 0, sorted_indices = 0;
  Tensor expert_input = 0;  // [R, h]: tokens this rank's experts received
  std::vector<ExpertSaved> experts;
  Tensor combined = 0;  // [T*k, h]: expert outputs back in token order, saved by the probs multiply
  Tensor shared_fc1 = 0, shared_act = 0;
  std::uint64_t received = 0;  // R
};

// What one transformer layer's forward leaves for its backward. Under full recompute only
// `input` (the checkpoint) is set.
struct LayerSaved {
  std::int32_t layer = -1;
  Tensor input = 0;
  bool owns_input = true;  // false when input is a pipeline receive buffer
  Tensor ln1 = 0, ln1_mean = 0, ln1_rstd = 0, qkv = 0, q_rot = 0, k_rot = 0;
  AttentionCore core;
  Tensor mask1 = 0, res1 = 0, ln2 = 0, ln2_mean = 0, ln2_rstd = 0;
  Tensor fc1 = 0, act = 0, mask2 = 0;
  Tensor silu = 0;  // SwiGLU's silu(x0), saved by the product with x1
  MoeSaved moe;
};

struct EmbeddingSaved {
  Tensor input_mask = 0, masked_ids = 0, mask = 0;
};

struct HeadSaved {
  Tensor input = 0;  // the last layer's output
  Tensor ln = 0, ln_mean = 0, ln_rstd = 0;
  Tensor logits32 = 0, target_mask = 0, masked_target = 0;
  Tensor losses = 0, denominator = 0;
};

// One (model chunk, micro-batch) forward, waiting for its backward.
struct StageState {
  std::uint64_t chunk = 0;
  std::uint64_t microbatch = 0;
  Tensor tokens = 0, loss_mask = 0;  // batch tensors autograd keeps
  Tensor attention_mask = 0;  // kept by every layer's checkpoint under full recompute
  EmbeddingSaved embedding;
  std::vector<LayerSaved> layers;
  HeadSaved head;
  Tensor output = 0;  // last layer's output, or the loss on the last stage
  Tensor reported_loss = 0;  // the loss kept for logging until the iteration ends
  Tensor rotary = 0;  // the step's rotary frequencies, saved by every layer's checkpoint or RoPE
  // Packed documents: how many fill the micro-batch, and the batch's cu_seqlens (and, with
  // context parallelism, cu_seqlens_padded), kept by every layer's attention until the backward.
  std::uint64_t docs = 1;
  Tensor cu_seqlens = 0, cu_seqlens_padded = 0;
};

class ModelEmitter {
 public:
  ModelEmitter(const GeneratorConfig& cfg, TensorBuilder& builder);

  // Model weights, gradient buffers and the optimizer's fp32 main parameters: allocated once,
  // never freed (Adam's moments follow at the first optimizer step unless made eagerly).
  void persistent_allocations();
  void begin_iteration(std::uint32_t iteration, std::uint64_t seq);
  const Dims& dims() const { return d_; }

  bool first_stage(std::uint64_t chunk) const;  // holds the embedding
  bool last_stage(std::uint64_t chunk) const;   // holds the output layer and the loss

  // Runs chunk's layers for a micro-batch on `input` (a receive buffer, or 0 on the first stage).
  StageState forward_step(std::uint64_t chunk, std::uint64_t microbatch, Tensor input);
  // Backward of a forward step; grad_output is the receive buffer (0 on the last stage) and
  // stays the caller's. Returns the gradient of the step's input (0 on the first stage).
  Tensor backward_step(StageState& st, Tensor grad_output);

  void optimizer_step();

 private:
  // Megatron DDP's buffers for one model chunk; returns the optimizer's shards of its parameters
  // (params given in construction order).
  std::vector<ParamTensor> ddp_buffers(std::vector<Tensor>& weights, const std::vector<ParamTensor>& params);
  // Adam's exp_avg and exp_avg_sq, one pair per optimizer parameter, as FusedAdam's state
  // initialisation makes them (never freed).
  void adam_moments();
  // One transformer layer. grad = false runs it as under torch.no_grad (the first pass of a
  // fully recomputed layer): every activation is freed once the forward no longer needs it.
  LayerSaved layer_forward(Tensor x, bool owns_input, std::int32_t layer, bool grad, Tensor* out);
  Tensor layer_backward(LayerSaved& L, Tensor dy, bool owns_dy);

  AttentionCore attention_forward(bool grad);
  // Transformer Engine's ring attention (AttnFuncWithCPAndKVP2P, flash-attn backend) on CP rank 0:
  // forward, and the core's backward, which leaves dQ in *dq and the dK/dV buffer in *dkv.
  AttentionCore cp_attention_forward(bool grad);
  void cp_core_backward(AttentionCore& c, Tensor& d_out, bool free_out, Tensor* dq, Tensor* dkv);
  // Megatron checkpoints the core attention under selective recompute: the legacy model only
  // without flash attention, Megatron-core (the context-parallel path) with any backend.
  bool checkpoints_core_attention() const;
  // get_batch with context parallelism or packed documents: the full-length batch tensors, then
  // get_batch_on_this_cp_rank keeps this rank's chunks (index_select into new tensors).
  void load_batch_cp(StageState& st, bool first, bool last, Tensor* labels, Tensor* position_ids);
  // Frees the layer's Q, K, V (and their rotated copies) once the core's backward has run.
  Tensor attention_backward(AttentionCore& c, LayerSaved& L, Tensor& d_out, bool free_out);

  Tensor moe_forward(MoeSaved& M, bool grad, std::int32_t layer);
  // The gradient of the MoE output is read by every branch and stays the caller's.
  Tensor moe_backward(MoeSaved& M);

  Tensor embedding_forward(StageState& st);
  void embedding_backward(StageState& st, Tensor dx);
  void head_forward(StageState& st, Tensor x);
  Tensor head_backward(StageState& st);

  void norm_forward(Tensor* out, Tensor* mean, Tensor* rstd);
  // Called before a GEMM: the calling thread's cuBLAS workspace on its first GEMM of the run.
  void cublas_workspace();
  // RotaryEmbedding.forward for the step: arange, outer product, cat; the [s, 1, 1, d] fp32
  // result is returned.
  Tensor rotary_frequencies();
  // A column-parallel linear's output: the GEMM result, and with a bias the sum as a new
  // tensor (the GEMM result dies once the add has run).
  Tensor biased_linear_output(std::uint64_t bytes);
  void norm_weight_grads();
  // A column-parallel linear's input under sequence parallelism is all-gathered into
  // Megatron's global memory buffer: allocated once, replaced only when it must grow.
  void gather_input();
  // A row-parallel linear's output: [s, b, h] partial sums, all-reduced in place, or
  // reduce-scattered into a new [s/t, b, h] tensor under sequence parallelism.
  Tensor row_parallel_output();
  // The backward of that reduce-scatter: the [s/t, b, h] gradient all-gathered to [s, b, h].
  Tensor gather_grad(Tensor& g, bool owns_g);
  // The backward of a column-parallel linear: the input gradient (reduce-scattered under
  // sequence parallelism) and the weight gradient temporaries.
  Tensor column_parallel_backward(std::uint64_t weight, std::uint64_t bias);
  void weight_grad(std::uint64_t weight_elems, std::uint64_t bias_elems);

  std::int32_t layer_offset(std::uint64_t chunk) const;

  const GeneratorConfig& cfg_;
  TensorBuilder& b_;
  ParamSizes params_;
  Dims d_;
  std::uint32_t iteration_ = 0;
  std::uint64_t layers_per_chunk_ = 0;
  std::vector<std::uint64_t> optimizer_numels_;  // elements of each optimizer parameter, in step order
  Tensor gather_buffer_ = 0;
  std::vector<std::uint16_t> cublas_threads_;  // threads whose workspace exists
  std::uint64_t gather_capacity_ = 0;
  std::uint64_t docs_ = 1;  // packed documents in the micro-batch being run
};

}  // namespace stalloc::gen
