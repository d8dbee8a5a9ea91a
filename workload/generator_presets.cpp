// The built-in workloads: the configurations STAlloc's artifact measured (design brief, section
// 7) plus a tiny one for tests. The parallel layouts assume 8 GPUs as in the artifact.
#include <functional>

#include "common/error.h"
#include "workload/generator.h"

namespace stalloc {
namespace {

struct Preset {
  PresetInfo info;
  std::function<void(GeneratorConfig&)> apply;
};

GeneratorConfig llama7b() {
  GeneratorConfig c;
  c.hidden = 4096;
  c.ffn = 11008;
  c.heads = 32;
  c.kv_heads = 32;
  c.layers = 32;
  c.vocab = 32000;
  c.swiglu = true;
  c.norm = NormKind::RmsNorm;
  c.bias = false;
  c.dropout = false;
  c.flash_attention = true;
  c.distributed_optimizer = true;
  return c;
}

// Llama-3-8B (Meta's config.json: hidden 4096, ffn 14336, 32 heads, 8 KV heads, 32 layers,
// vocabulary 128256, RoPE, RMSNorm, SwiGLU, no biases, no dropout) as NeMo 2.0's long-context
// recipes train it with Megatron-core and Transformer Engine: flash attention, distributed
// optimizer, --overlap-grad-reduce (buckets of max(40M, 1M * dp) elements) and no data-loader
// attention mask (a [b, 1, s, s] bool mask is 16 GiB at 128k). The vocabulary is padded to a
// multiple of 128 * tp (--make-vocab-size-divisible-by 128).
GeneratorConfig llama3_8b(std::uint64_t tp) {
  GeneratorConfig c;
  c.hidden = 4096;
  c.ffn = 14336;
  c.heads = 32;
  c.kv_heads = 8;
  c.layers = 32;
  const std::uint64_t pad = 128 * tp;
  c.vocab = (128256 + pad - 1) / pad * pad;
  c.swiglu = true;
  c.rope = true;
  c.norm = NormKind::RmsNorm;
  c.bias = false;
  c.dropout = false;
  c.flash_attention = true;
  c.distributed_optimizer = true;
  c.grad_bucket_elems = 40000000;
  c.attention_mask_in_dataloader = false;
  c.micro_batch = 1;
  c.dp = 1;
  c.tp = tp;
  c.sequence_parallel = true;
  return c;
}

// NeMo's llama3_8b_64k: TP2+SP, PP4, CP4 on 32 GPUs (DP1), MBS 1. The recipe's VPP5 does not
// divide 32 layers over 4 stages (Megatron needs layers % (pp * vpp) == 0), so 1F1B; GBS 512 is
// cut to 8 micro-batches: rank 0 holds pp = 4 of them in flight either way.
GeneratorConfig llama3_8b_64k() {
  GeneratorConfig c = llama3_8b(2);
  c.seq_len = 65536;
  c.pp = 4;
  c.cp = 4;
  c.global_batch = 8;
  c.iterations = 3;
  return c;
}

// NeMo's llama3_8b_128k: TP4+SP, PP2, CP8 on 64 GPUs (DP1), MBS 1; GBS 512 cut to 4
// micro-batches (rank 0 holds pp = 2 in flight either way).
GeneratorConfig llama3_8b_128k() {
  GeneratorConfig c = llama3_8b(4);
  c.seq_len = 131072;
  c.pp = 2;
  c.cp = 8;
  c.global_batch = 4;
  c.iterations = 3;
  return c;
}

const std::vector<Preset>& table() {
  static const std::vector<Preset> presets = {
      {{"tiny", "2 layers, hidden 256, TP2+SP, PP2, 4 micro-batches, 3 iterations (for tests)"},
       [](GeneratorConfig& c) {
         c.hidden = 256;
         c.ffn = 1024;
         c.heads = 4;
         c.kv_heads = 4;
         c.layers = 2;
         c.vocab = 1024;
         c.swiglu = false;
         c.rope = false;
         c.norm = NormKind::LayerNorm;
         c.bias = true;
         c.dropout = true;
         c.flash_attention = false;
         c.seq_len = 128;
         c.micro_batch = 2;
         c.global_batch = 8;
         c.tp = 2;
         c.pp = 2;
         c.sequence_parallel = true;
         c.iterations = 3;
       }},
      // The three presets below are the configurations of STAlloc's artifact scripts
      // (example/llama/ZR.sh, V.sh, example/gpt2/ZR.sh: Megatron-LM core_r0.8.0 legacy models,
      // bf16, flash attention, --no-gradient-accumulation-fusion). They keep Megatron's defaults
      // the scripts do not override: biased linear layers (no --disable-bias-linear) and hidden
      // dropout 0.1 (flash attention draws its attention dropout inside the kernel).
      {{"llama7b-tp2pp2-r",
        "Llama-7B, seq 4096, MBS 4, 16 micro-batches, full recompute, TP2+SP PP2 DP2, distributed optimizer"},
       [](GeneratorConfig& c) {
         c = llama7b();
         c.bias = true;
         c.dropout = true;
         c.seq_len = 4096;
         c.micro_batch = 4;
         c.dp = 2;
         c.global_batch = 128;
         c.tp = 2;
         c.pp = 2;
         c.sequence_parallel = true;
         c.recompute = RecomputeKind::Full;
       }},
      {{"llama7b-tp4pp2vpp2",
        "Llama-7B, seq 4096, MBS 4, 32 micro-batches, interleaved TP4+SP PP2 VPP2, no recompute"},
       [](GeneratorConfig& c) {
         c = llama7b();
         c.bias = true;
         c.dropout = true;
         c.distributed_optimizer = false;  // V.sh does not pass --use-distributed-optimizer
         c.seq_len = 4096;
         c.micro_batch = 4;
         c.dp = 1;
         c.global_batch = 128;
         c.tp = 4;
         c.pp = 2;
         c.vpp = 2;
         c.schedule = PipelineScheduleKind::Interleaved;
         c.sequence_parallel = true;
         // V.sh asks for selective recompute, but the legacy ParallelAttention checkpoints only
         // the non-flash core attention: with --use-flash-attn nothing is recomputed.
       }},
      {{"gpt2-1024-mbs128-r",
        "GPT-2 size (hidden 1024, 24 layers) in the artifact's Llama-style layers, seq 1024, MBS 128, full recompute, TP2+SP PP2 DP2"},
       [](GeneratorConfig& c) {
         c = llama7b();  // example/gpt2/ZR.sh passes --swiglu, RMSNorm and rotary embeddings
         c.hidden = 1024;
         c.ffn = 4096;
         c.heads = 16;
         c.kv_heads = 16;
         c.layers = 24;
         // Llama's 32000 (the script passes --tokenizer-model): with GPT-2's padded 50432 the
         // last stage's bf16 and fp32 logits alone (19.8 GB) would exceed the 15.06 GB peak the
         // artifact logged for it; with 32000 they and the rest come to about that peak.
         c.vocab = 32000;
         c.bias = true;
         c.dropout = true;
         c.seq_len = 1024;
         c.micro_batch = 128;
         c.dp = 2;
         c.global_batch = 1024;
         c.tp = 2;
         c.pp = 2;
         c.sequence_parallel = true;
         c.recompute = RecomputeKind::Full;
       }},
      {{"qwen-moe",
        "Qwen-MoE: 24 layers, hidden 2048, 60 experts top-4 + 4 shared, seq 4096, PP2 EP4 DP4"},
       [](GeneratorConfig& c) {
         c = llama7b();
         c.hidden = 2048;
         c.heads = 16;
         c.kv_heads = 16;
         c.layers = 24;
         c.vocab = 151936;
         c.experts = 60;
         c.top_k = 4;
         c.shared_experts = 4;
         c.expert_ffn = 1408;
         c.ffn = 5632;
         c.seq_len = 4096;
         c.micro_batch = 1;
         c.dp = 4;
         c.ep = 4;
         c.global_batch = 32;
         c.pp = 2;
       }},
      {{"llama7b-varlen",
        "Llama-7B, sequence length drawn per iteration in 512..8192, MBS 1, TP2+SP PP2 DP2"},
       [](GeneratorConfig& c) {
         c = llama7b();
         c.seq_len = 4096;
         c.seq_min = 512;
         c.seq_max = 8192;
         c.micro_batch = 1;
         c.dp = 2;
         c.global_batch = 16;
         c.tp = 2;
         c.pp = 2;
         c.sequence_parallel = true;
       }},
      // Long context (docs/workloads.md "Long context"): NeMo 2.0's Llama-3-8B recipes
      // (nemo/collections/llm/recipes/llama3_8b_64k.py, llama3_8b_128k.py) with context
      // parallelism through Transformer Engine's ring attention.
      {{"llama3-8b-64k-cp4",
        "Llama-3-8B, seq 65536, CP4 ring attention, TP2+SP PP4, MBS 1, 8 micro-batches, no recompute (NeMo llama3_8b_64k)"},
       [](GeneratorConfig& c) { c = llama3_8b_64k(); }},
      {{"llama3-8b-64k-cp4-sel",
        "llama3-8b-64k-cp4 with selective recompute (Megatron-core checkpoints the core attention)"},
       [](GeneratorConfig& c) {
         c = llama3_8b_64k();
         c.recompute = RecomputeKind::Selective;
       }},
      {{"llama3-8b-64k-packed",
        "llama3-8b-64k-cp4 on packed documents of 512..32768 tokens (thd, cu_seqlens): 65536 tokens per micro-batch"},
       [](GeneratorConfig& c) {
         c = llama3_8b_64k();
         c.doc_min = 512;
         c.doc_max = 32768;
         c.iterations = 4;
       }},
      {{"llama3-8b-128k-cp8",
        "Llama-3-8B, seq 131072, CP8 ring attention, TP4+SP PP2, MBS 1, 4 micro-batches, no recompute (NeMo llama3_8b_128k)"},
       [](GeneratorConfig& c) { c = llama3_8b_128k(); }},
      {{"llama3-8b-128k-cp8-r",
        "llama3-8b-128k-cp8 with full recompute (uniform, one layer per checkpoint)"},
       [](GeneratorConfig& c) {
         c = llama3_8b_128k();
         c.recompute = RecomputeKind::Full;
       }},
      {{"llama3-8b-varlen-128k",
        "llama3-8b-128k-cp8 with one unpacked sequence per iteration, drawn in 8192..131072 (random order), 8 iterations"},
       [](GeneratorConfig& c) {
         c = llama3_8b_128k();
         c.seq_min = 8192;
         c.seq_max = 131072;
         c.iterations = 8;
       }},
  };
  return presets;
}

}  // namespace

GeneratorConfig preset(std::string_view name) {
  for (const Preset& p : table()) {
    if (p.info.name == name) {
      GeneratorConfig c;
      p.apply(c);
      c.name = p.info.name;
      return c;
    }
  }
  std::string known;
  for (const Preset& p : table()) {
    if (!known.empty()) known += ", ";
    known += p.info.name;
  }
  throw UsageError("unknown preset '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<PresetInfo> presets() {
  std::vector<PresetInfo> out;
  for (const Preset& p : table()) out.push_back(p.info);
  return out;
}

}  // namespace stalloc
