// Synthetic training traces: one pipeline rank's allocation requests over several iterations of
// a Megatron-LM-style decoder-only transformer, in the order Megatron + PyTorch autograd issue
// them. The tensor sizes and their lifetimes are documented in docs/workloads.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trace/trace.h"

namespace stalloc {

enum class PipelineScheduleKind : std::uint8_t { OneFOneB, Interleaved };
enum class RecomputeKind : std::uint8_t { None, Selective, Full };
enum class NormKind : std::uint8_t { LayerNorm, RmsNorm };

struct GeneratorConfig {
  std::string name = "custom";  // preset name, recorded in the trace's meta

  // Model.
  std::uint64_t hidden = 4096;
  std::uint64_t ffn = 11008;  // dense MLP inner size (per expert: expert_ffn)
  std::uint64_t heads = 32;
  std::uint64_t kv_heads = 32;  // < heads: grouped-query attention
  std::uint64_t layers = 32;    // transformer layers of the whole model
  std::uint64_t vocab = 32000;
  bool swiglu = true;   // gated MLP (fc1 is 2*ffn wide) instead of GeLU
  bool rope = true;     // rotary position embedding applied to Q and K (out of place)
  NormKind norm = NormKind::RmsNorm;
  bool bias = false;     // linear layers have biases (GPT-2) or not (Llama)
  bool dropout = false;  // attention and hidden dropout > 0: dropout masks are saved

  // Data. seq_len is the sequence length of every iteration unless seq_max > 0 (each iteration
  // draws its own in [seq_min, seq_max]) or seq_list is set (iteration i uses
  // seq_list[i % size]).
  std::uint64_t seq_len = 4096;
  std::uint64_t seq_min = 0;
  std::uint64_t seq_max = 0;
  std::vector<std::uint64_t> seq_list;
  std::uint64_t micro_batch = 1;
  std::uint64_t global_batch = 8;  // micro-batches per iteration = global / (micro * dp)
  // Packed documents (FlashAttention's variable-length layout, Transformer Engine's thd format):
  // doc_max > 0 fills each micro-batch's s tokens with documents whose lengths are drawn in
  // [doc_min, doc_max] per (iteration, micro-batch); the total stays s, only the number of
  // documents (the cu_seqlens tensors, dynamic) varies. 0: one unpacked sequence per sample.
  std::uint64_t doc_min = 0;
  std::uint64_t doc_max = 0;

  // Parallelism.
  std::uint64_t dp = 1;
  std::uint64_t tp = 1;
  std::uint64_t pp = 1;
  std::uint64_t vpp = 1;            // model chunks per pipeline rank
  std::uint64_t pipeline_rank = 0;  // rank 0 holds the most activations in flight
  PipelineScheduleKind schedule = PipelineScheduleKind::OneFOneB;  // Interleaved needs vpp > 1
  std::uint64_t ep = 1;             // expert parallel: experts are split over ep data-parallel ranks
  bool sequence_parallel = false;
  // Context parallelism (Megatron-core --context-parallel-size with Transformer Engine's ring
  // attention, cp_comm_type p2p): the sequence is cut into 2*cp chunks and this rank keeps chunks
  // 0 and 2*cp-1 (CP rank 0), s/cp tokens; attention exchanges K and V around the ring. The
  // distributed optimizer shards over dp*cp ranks. docs/workloads.md "Long context".
  std::uint64_t cp = 1;
  bool distributed_optimizer = false;
  bool comm_stream = false;  // pipeline receive buffers on stream 1 instead of the default stream
  // Adam's exp_avg and exp_avg_sq made at the first optimizer step, as Apex's, Transformer
  // Engine's and PyTorch's Adam initialise their state; off: with the main parameters before
  // iteration 0.
  bool lazy_adam_state = true;
  // Megatron DDP's gradient bucket size in elements: 0 is one bucket per buffer (Megatron without
  // --overlap-grad-reduce); with it Megatron uses max(40M, 1M * dp). The distributed optimizer
  // gives each data-parallel rank 1/dp of every bucket.
  std::uint64_t grad_bucket_elems = 0;
  // The cuBLAS workspace PyTorch takes from its caching allocator at the first GEMM of each
  // (handle, stream), kept for the run: the default CUBLAS_WORKSPACE_CONFIG :4096:2:16:8 is
  // 2 x 4 MiB + 8 x 16 KiB. Forward and backward run on different threads, hence handles.
  std::uint64_t cublas_workspace = 8519680;
  // The data loader builds the [b, 1, s, s] bool causal mask even when flash attention ignores
  // it (Megatron's --create-attention-mask-in-dataloader default); off: only without flash.
  bool attention_mask_in_dataloader = true;

  // Memory-saving techniques.
  RecomputeKind recompute = RecomputeKind::None;
  bool flash_attention = true;

  // Mixture of experts; experts == 0 is a dense model.
  std::uint64_t experts = 0;
  std::uint64_t top_k = 2;
  std::uint64_t shared_experts = 0;
  std::uint64_t expert_ffn = 0;
  double routing_skew = 1.0;  // Zipf exponent of expert popularity (0 = uniform routing)

  std::uint64_t iterations = 4;
  std::uint64_t seed = 1;
};

struct PresetInfo {
  std::string name;
  std::string description;  // one line
};

// The events of cfg's run, with meta recording the configuration. Deterministic for a config
// (the seed drives MoE routing and variable sequence lengths). Throws UsageError when the
// configuration is inconsistent (see validate_config).
Trace generate_trace(const GeneratorConfig& cfg);

// Throws UsageError naming the first inconsistency (heads not divisible by tp, layers not
// divisible by pp*vpp, global batch not a multiple of micro_batch*dp, ...).
void validate_config(const GeneratorConfig& cfg);

// Built-in workloads. preset throws UsageError for an unknown name, listing the known ones.
GeneratorConfig preset(std::string_view name);
std::vector<PresetInfo> presets();

// Sets one field from its command-line spelling: key "micro-batch" (or "micro_batch"), value
// "2". Booleans take on/off/true/false/1/0, enums their names (schedule 1f1b|interleaved,
// recompute none|selective|full), seq-list a comma-separated list. Throws UsageError for an
// unknown key or a bad value.
void set_config_field(GeneratorConfig& cfg, std::string_view key, std::string_view value);
// The keys set_config_field accepts, in their command-line spelling.
std::vector<std::string> config_field_names();
// "key=value" pairs of every field, space-separated: the trace's "generator" meta entry.
std::string describe_config(const GeneratorConfig& cfg);

// Micro-batches each iteration runs on this rank: global_batch / (micro_batch * dp).
std::uint64_t microbatches_per_iteration(const GeneratorConfig& cfg);

// What every sequence length must be a multiple of: tp under sequence parallelism (else 1);
// with context parallelism 2*cp times that (two chunks per CP rank, each split over tp).
std::uint64_t sequence_granule(const GeneratorConfig& cfg);

// Model FLOPs of one training iteration at sequence length `seq` on the traced rank (its pipeline
// stage, its tensor-parallel share): forward, backward and, with full recomputation, the forward
// again. docs/workloads.md gives the formula.
double flops_per_iteration(const GeneratorConfig& cfg, std::uint64_t seq);

}  // namespace stalloc
