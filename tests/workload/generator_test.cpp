#include "workload/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include "common/error.h"
#include "workload/generator_random.h"
#include "workload/generator_schedule.h"

namespace stalloc {
namespace {

// A GPT-style layer as Korthikanti et al. 2022 count it: LayerNorm, GeLU MLP with ffn = 4h,
// biases, dropout, no flash attention. s = 128, b = 2, h = 256, a = 4: s*b*h = 65536.
GeneratorConfig gpt_layer_config() {
  GeneratorConfig c;
  c.hidden = 256;
  c.ffn = 1024;
  c.heads = 4;
  c.kv_heads = 4;
  c.layers = 4;
  c.vocab = 512;
  c.swiglu = false;
  c.rope = false;
  c.norm = NormKind::LayerNorm;
  c.bias = true;
  c.dropout = true;
  c.flash_attention = false;
  c.seq_len = 128;
  c.micro_batch = 2;
  c.global_batch = 2;
  c.iterations = 1;
  return c;
}

// Bytes of the forward allocations tagged with `layer` (micro-batch 0) still live when the
// first backward event happens. For a middle layer that is what the layer saves for backward
// with its input replaced by its output (the same size): Korthikanti's per-layer activations.
std::uint64_t saved_bytes_of_layer(const Trace& t, std::int32_t layer) {
  std::unordered_map<std::uint64_t, Event> live;
  for (const Event& e : t.events) {
    if (e.phase == Phase::Backward) break;
    if (e.kind == EventKind::Alloc) live.emplace(e.id, e);
    else live.erase(e.id);
  }
  std::uint64_t bytes = 0;
  for (const auto& [id, e] : live) {
    if (e.phase == Phase::Forward && e.layer == layer && e.microbatch == 0) bytes += e.size;
  }
  return bytes;
}

constexpr std::uint64_t kSbh = 128 * 2 * 256;
constexpr std::uint64_t kTokens = 128 * 2;

TEST(GeneratorLayer, KorthikantiWithoutParallelism) {
  // s*b*h*(34 + 5*a*s/h) = 65536 * (34 + 5*4*128/256) = 65536 * 44, plus the LayerNorm
  // statistics the paper leaves out: 2 norms * (mean + rstd) * s*b * 4 bytes.
  const Trace t = generate_trace(gpt_layer_config());
  EXPECT_EQ(saved_bytes_of_layer(t, 2), kSbh * 44 + 4 * kTokens * 4);
  EXPECT_EQ(saved_bytes_of_layer(t, 2), 2887680u);
}

TEST(GeneratorLayer, TensorParallelWithoutSequenceParallel) {
  // s*b*h*(10 + 24/t + 5*a*s/(h*t)) with t = 2: 65536 * (10 + 12 + 5).
  GeneratorConfig c = gpt_layer_config();
  c.tp = 2;
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 2), kSbh * 27 + 4 * kTokens * 4);
}

TEST(GeneratorLayer, TensorParallelWithSequenceParallel) {
  // s*b*h/t * (34 + 5*a*s/h) with t = 2: 32768 * 44; the norm statistics are sharded too.
  GeneratorConfig c = gpt_layer_config();
  c.tp = 2;
  c.sequence_parallel = true;
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 2), kSbh / 2 * 44 + 4 * (kTokens / 2) * 4);
}

TEST(GeneratorLayer, FlashAttentionKeepsSoftmaxStatisticsInsteadOfScores) {
  // 34*s*b*h, plus the log-sum-exp b*a*s fp32 = 2*4*128*4 bytes, plus the norm statistics.
  // Megatron's flash path saves Q, K, V as [b, s] copies (6 sbh, where Korthikanti counts the
  // QKV output) and flash's own output in that layout (2 sbh) besides the [s, b] context.
  GeneratorConfig c = gpt_layer_config();
  c.flash_attention = true;
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 2), kSbh * (34 + 2) + 2 * 4 * 128 * 4 + 4 * kTokens * 4);
}

TEST(GeneratorLayer, SelectiveRecomputeDropsTheAttentionScores) {
  GeneratorConfig c = gpt_layer_config();
  c.recompute = RecomputeKind::Selective;
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 2), kSbh * 34 + 4 * kTokens * 4);
}

TEST(GeneratorLayer, FullRecomputeKeepsOnlyTheCheckpoint) {
  // The layer's output, which is the next layer's checkpointed input: 2*s*b*h.
  GeneratorConfig c = gpt_layer_config();
  c.recompute = RecomputeKind::Full;
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 2), kSbh * 2);
}

TEST(GeneratorLayer, LlamaStyleLayer) {
  // RMSNorm, SwiGLU (fc1 2*ffn wide), grouped-query attention with 2 KV heads (head dim 64),
  // rotary embedding, flash attention, no dropout. Per tensor, in bytes (bf16 unless noted):
  GeneratorConfig c = gpt_layer_config();
  c.norm = NormKind::RmsNorm;
  c.swiglu = true;
  c.kv_heads = 2;
  c.flash_attention = true;
  c.dropout = false;
  c.bias = false;
  c.rope = true;
  // The rotated Q and K and the QKV output die with Attention.forward: flash attention saved
  // its own [b, s] copies of Q, K, V.
  const std::uint64_t ln1 = kSbh * 2, ln2 = kSbh * 2, res1 = kSbh * 2, out = kSbh * 2;
  const std::uint64_t qkv = kTokens * (4 + 2 * 2) * 64 * 2;  // flash's Q, K, V: (a + 2g) * d wide
  const std::uint64_t flash_out = kSbh * 2;                  // [b, s, a, d]
  const std::uint64_t context = kSbh * 2;                    // [s, b, h]
  const std::uint64_t lse = 2 * 4 * 128 * 4;                 // b * a * s fp32
  const std::uint64_t fc1 = kTokens * 2 * 1024 * 2;          // SwiGLU input
  const std::uint64_t silu = kTokens * 1024 * 2;             // silu(x0), saved by the product
  const std::uint64_t act = kTokens * 1024 * 2;              // fc2 input
  const std::uint64_t rstd = 2 * kTokens * 4;                // one statistic per RMSNorm
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 2),
            ln1 + qkv + flash_out + context + lse + res1 + ln2 + fc1 + silu + act + out + rstd);
  // 131072 * 3 + 262144 + 131072 * 2 + 4096 + 131072 * 2 + 1048576 + 524288 * 2 + 131072 + 2048.
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 2), 3151872u);
}

std::uint64_t persistent_bytes(const Trace& t) {
  std::uint64_t bytes = 0;
  for (const Lifetime& l : compute_lifetimes(t)) bytes += l.persistent ? l.size : 0;
  return bytes;
}

// The optimizer's main parameters: the persistent allocations (other than FusedAdam's 4-byte
// flag) made before iteration 0 after the fp32 main_grad buffer of `grad_buffer_bytes`.
std::vector<std::uint64_t> main_param_sizes(const Trace& t, std::uint64_t grad_buffer_bytes) {
  std::vector<std::uint64_t> out;
  bool after_buffer = false;
  for (const Lifetime& l : compute_lifetimes(t)) {
    if (!l.persistent || l.phase != Phase::Other) continue;
    if (after_buffer && l.size > 4) out.push_back(l.size);
    after_buffer = after_buffer || l.size == grad_buffer_bytes;
  }
  return out;
}

// The persistent allocations of an iteration's optimizer step.
std::vector<std::uint64_t> made_in_step(const Trace& t, std::uint32_t iteration) {
  std::vector<std::uint64_t> out;
  for (const Lifetime& l : compute_lifetimes(t)) {
    if (l.persistent && l.phase == Phase::Optimizer && l.iteration == iteration) out.push_back(l.size);
  }
  return out;
}

// Parameters of gpt_layer_config, per layer in construction order: LayerNorm 256 + 256, QKV
// 256*768 + 768, projection 256*256 + 256, LayerNorm 256 + 256, fc1 256*1024 + 1024, fc2
// 1024*256 + 256: 789760 elements. Four layers, embedding and output layer 512*256 each, final
// LayerNorm 512: 3159040 + 262144 + 512 = 3421696.
constexpr std::uint64_t kNumel = 3421696;
const std::vector<std::uint64_t> kLayerParams = {256, 256, 196608, 768, 65536, 256, 256, 256, 262144, 1024, 262144, 256};

TEST(GeneratorPersistent, WeightsGradientBufferAndAdamState) {
  GeneratorConfig c = gpt_layer_config();
  c.cublas_workspace = 0;
  // bf16 weights, fp32 main_grad buffer, fp32 main params + exp_avg + exp_avg_sq, Adam's flag.
  EXPECT_EQ(persistent_bytes(generate_trace(c)), kNumel * 2 + kNumel * 4 + 3 * kNumel * 4 + 4);
  c.distributed_optimizer = true;
  c.dp = 2;
  c.global_batch = 4;
  // The bf16 parameter buffer replaces the weights; every size is a multiple of 64 and the
  // buffer of 128 (lcm(dp, 128)), so no padding; the optimizer state is sharded over 2 ranks.
  EXPECT_EQ(persistent_bytes(generate_trace(c)), kNumel * 2 + kNumel * 4 + 3 * (kNumel / 2) * 4 + 4);
}

TEST(GeneratorPersistent, OneMainParameterPerParameterTensor) {
  // Float16OptimizerWithFloat16Params: param.detach().clone().float() for each parameter, in
  // the weight-decay group first (the embedding comes first in the model), then the norms and
  // biases, each in model order.
  GeneratorConfig c = gpt_layer_config();
  std::vector<std::uint64_t> decay = {131072}, no_decay;
  for (int layer = 0; layer < 4; ++layer) {
    for (std::uint64_t n : kLayerParams) (n >= 65536 ? decay : no_decay).push_back(n);
  }
  no_decay.insert(no_decay.end(), {256, 256});
  decay.push_back(131072);
  std::vector<std::uint64_t> expected;
  for (std::uint64_t n : decay) expected.push_back(n * 4);
  for (std::uint64_t n : no_decay) expected.push_back(n * 4);
  EXPECT_EQ(main_param_sizes(generate_trace(c), kNumel * 4), expected);
  // Each main parameter comes from a bf16 clone that dies once the fp32 copy exists.
  const Trace t = generate_trace(c);
  std::size_t clones = 0;
  for (std::size_t i = 0; i + 2 < t.events.size(); ++i) {
    const Event &a = t.events[i], &b = t.events[i + 1], &f = t.events[i + 2];
    if (a.kind == EventKind::Alloc && b.kind == EventKind::Alloc && f.kind == EventKind::Free && f.id == a.id &&
        b.size == 2 * a.size && a.phase == Phase::Other) {
      ++clones;
    }
  }
  EXPECT_EQ(clones, expected.size());
}

TEST(GeneratorPersistent, DistributedOptimizerShardsFollowTheGradientBuffer) {
  GeneratorConfig c = gpt_layer_config();
  c.distributed_optimizer = true;
  c.dp = 2;
  c.global_batch = 4;
  // One bucket: the buffer holds the parameters in reverse, rank 0 owns its first half, 1710848
  // elements: output 131072, final norm 256 + 256, all of layer 3 (789760, 921344 so far) and
  // layer 2 except its first parameter, the input norm weight (789760 - 256 = 789504).
  std::vector<std::uint64_t> sizes = main_param_sizes(generate_trace(c), kNumel * 4);
  EXPECT_EQ(sizes.size(), 3u + 12u + 11u);
  std::uint64_t total = 0;
  for (std::uint64_t s : sizes) total += s;
  EXPECT_EQ(total, kNumel / 2 * 4);
  // Buckets of one parameter each (closed as soon as they hold >= 1 element, padded to 128):
  // every parameter is split in half between the two ranks, so rank 0 has 52 half-shards.
  c.grad_bucket_elems = 1;
  sizes = main_param_sizes(generate_trace(c), kNumel * 4);
  ASSERT_EQ(sizes.size(), 52u);
  std::multiset<std::uint64_t> halves(sizes.begin(), sizes.end());
  EXPECT_EQ(halves.count(262144 / 2 * 4), 8u);  // fc1 and fc2 weights of 4 layers
  EXPECT_EQ(halves.count(131072 / 2 * 4), 2u);  // embedding and output layer
  EXPECT_EQ(halves.count(196608 / 2 * 4), 4u);  // QKV weights
}

TEST(GeneratorPersistent, AdamMomentsAreMadeLazilyAtTheFirstStep) {
  GeneratorConfig c = gpt_layer_config();
  c.distributed_optimizer = true;
  c.dp = 2;
  c.global_batch = 4;
  c.iterations = 2;
  const Trace t = generate_trace(c);
  const std::vector<std::uint64_t> main = main_param_sizes(t, kNumel * 4);
  // FusedAdam.step: exp_avg then exp_avg_sq of each main parameter, in the optimizer's order,
  // in iteration 0's optimizer step, after every forward and backward of that iteration.
  std::vector<std::uint64_t> expected;
  for (std::uint64_t n : main) expected.insert(expected.end(), {n, n});
  EXPECT_EQ(made_in_step(t, 0), expected);
  EXPECT_TRUE(made_in_step(t, 1).empty());
  EXPECT_EQ(persistent_bytes(t), kNumel * 2 + kNumel * 4 + 3 * (kNumel / 2) * 4 + 4 + 2 * 8519680);
  // Made eagerly, they follow the main parameters before iteration 0 starts.
  c.lazy_adam_state = false;
  const Trace eager = generate_trace(c);
  EXPECT_TRUE(made_in_step(eager, 0).empty());
  EXPECT_EQ(main_param_sizes(eager, kNumel * 4).size(), 3 * main.size());
  EXPECT_EQ(persistent_bytes(eager), persistent_bytes(t));
}

TEST(GeneratorPersistent, OneCublasWorkspacePerThreadInIterationZero) {
  GeneratorConfig c = gpt_layer_config();
  c.iterations = 2;
  std::vector<std::uint16_t> threads;
  for (const Lifetime& l : compute_lifetimes(generate_trace(c))) {
    if (l.persistent && l.size == 8519680) {
      EXPECT_EQ(l.iteration, 0u);
      threads.push_back(l.thread);
    }
  }
  EXPECT_EQ(threads, (std::vector<std::uint16_t>{0, 1}));  // forward, then autograd's thread
}

TEST(GeneratorBatch, DataLoaderMaskLivesWithTheCheckpoints) {
  // [b, 1, s, s] bool = 2 * 128 * 128 bytes, made by the data loader although flash attention
  // ignores it; the forward step drops it, unless every layer's checkpoint saved it.
  GeneratorConfig c = gpt_layer_config();
  c.flash_attention = true;
  auto mask_freed_in = [](const Trace& t) {
    std::vector<Phase> phases;
    for (const Lifetime& l : compute_lifetimes(t)) {
      if (l.size == 2 * 128 * 128 && l.phase == Phase::Forward) phases.push_back(t.events[l.end].phase);
    }
    return phases;
  };
  EXPECT_EQ(mask_freed_in(generate_trace(c)), std::vector<Phase>{Phase::Forward});
  c.recompute = RecomputeKind::Full;
  EXPECT_EQ(mask_freed_in(generate_trace(c)), std::vector<Phase>{Phase::Backward});
  c.attention_mask_in_dataloader = false;
  EXPECT_TRUE(mask_freed_in(generate_trace(c)).empty());
}

// The compute steps as the trace shows them: consecutive layer events of one (direction,
// chunk, micro-batch) collapse into one step.
std::string steps_in_trace(const Trace& t, const GeneratorConfig& c) {
  const std::int32_t per_chunk = static_cast<std::int32_t>(c.layers / (c.pp * c.vpp));
  std::vector<PipelineStep> steps;
  for (const Event& e : t.events) {
    if (e.iteration != 1 || e.layer < 0 || (e.phase != Phase::Forward && e.phase != Phase::Backward)) continue;
    PipelineStep s;
    s.forward = e.phase == Phase::Forward;
    s.microbatch = static_cast<std::uint64_t>(e.microbatch);
    s.model_chunk = static_cast<std::uint64_t>(e.layer / per_chunk) / c.pp;
    if (steps.empty() || steps.back().forward != s.forward || steps.back().microbatch != s.microbatch ||
        steps.back().model_chunk != s.model_chunk) {
      steps.push_back(s);
    }
  }
  return schedule_string(steps, c.vpp);
}

TEST(GeneratorPipeline, TraceFollowsTheOneFOneBSchedule) {
  GeneratorConfig c = gpt_layer_config();
  c.pp = 4;
  c.global_batch = 16;  // 8 micro-batches
  c.iterations = 2;
  for (std::uint64_t rank = 0; rank < 4; ++rank) {
    c.pipeline_rank = rank;
    EXPECT_EQ(steps_in_trace(generate_trace(c), c), schedule_string(pipeline_schedule(4, rank, 8, 1), 1));
  }
}

TEST(GeneratorPipeline, TraceFollowsTheInterleavedSchedule) {
  GeneratorConfig c = gpt_layer_config();
  c.pp = 2;
  c.vpp = 2;
  c.schedule = PipelineScheduleKind::Interleaved;
  c.global_batch = 8;  // 4 micro-batches
  c.iterations = 2;
  c.recompute = RecomputeKind::Full;
  for (std::uint64_t rank = 0; rank < 2; ++rank) {
    c.pipeline_rank = rank;
    EXPECT_EQ(steps_in_trace(generate_trace(c), c), schedule_string(pipeline_schedule(2, rank, 4, 2), 2));
  }
}

TEST(GeneratorPipeline, BackwardRunsOnTheAutogradThread) {
  GeneratorConfig c = gpt_layer_config();
  c.pp = 2;
  c.global_batch = 8;
  c.comm_stream = true;
  bool saw_backward_layer = false, saw_stream1 = false;
  for (const Event& e : generate_trace(c).events) {
    if (e.layer >= 0 && e.phase == Phase::Backward) {
      EXPECT_EQ(e.thread, 1);
      saw_backward_layer = true;
    }
    if (e.phase == Phase::Forward || e.phase == Phase::Optimizer) {
      EXPECT_EQ(e.thread, 0);
    }
    if (e.stream == 1) {
      saw_stream1 = true;
      EXPECT_EQ(e.layer, -1);  // only pipeline receive buffers
    }
  }
  EXPECT_TRUE(saw_backward_layer);
  EXPECT_TRUE(saw_stream1);
}

TEST(GeneratorPipeline, StagePlacementOfEmbeddingAndLoss) {
  GeneratorConfig c = gpt_layer_config();
  c.pp = 2;
  c.vocab = 1000;
  c.micro_batch = 3;
  c.global_batch = 6;
  const std::uint64_t tokens = 128 * 3;
  // The logits (s*b*V/t bf16 and their fp32 copy) only on the last stage.
  auto has_size = [](const Trace& t, std::uint64_t size) {
    return std::any_of(t.events.begin(), t.events.end(), [&](const Event& e) { return e.size == size; });
  };
  c.pipeline_rank = 0;
  const Trace first = generate_trace(c);
  c.pipeline_rank = 1;
  const Trace last = generate_trace(c);
  EXPECT_FALSE(has_size(first, tokens * 1000 * 4));
  EXPECT_FALSE(has_size(first, tokens * 1000 * 2));
  EXPECT_TRUE(has_size(last, tokens * 1000 * 4));
  EXPECT_TRUE(has_size(last, tokens * 1000 * 2));
}

// Each preset shrunk to one layer per model chunk and two iterations (the full ones take
// longer than a unit test should).
GeneratorConfig reduced(const std::string& name) {
  GeneratorConfig c = preset(name);
  if (name != "tiny") {
    c.layers = c.pp * c.vpp;
    c.iterations = 2;
  }
  return c;
}

TEST(GeneratorPresets, EveryPresetIsAWellFormedTrace) {
  ASSERT_GE(presets().size(), 6u);
  for (const PresetInfo& p : presets()) {
    SCOPED_TRACE(p.name);
    EXPECT_FALSE(p.description.empty());
    const Trace t = generate_trace(reduced(p.name));
    EXPECT_EQ(validate_trace(t), "");
    EXPECT_GT(lower_bound_bytes(t), 0u);
    // Nothing but the run's state outlives an iteration: the same allocations are live after
    // every iteration.
    std::set<std::uint64_t> live;
    std::vector<std::size_t> live_at_end;
    for (std::size_t i = 0; i < t.events.size(); ++i) {
      const Event& e = t.events[i];
      if (e.kind == EventKind::Alloc) live.insert(e.id);
      else live.erase(e.id);
      if (i + 1 == t.events.size() || t.events[i + 1].iteration != e.iteration) live_at_end.push_back(live.size());
    }
    ASSERT_EQ(live_at_end.size(), reduced(p.name).iterations);
    for (std::size_t n : live_at_end) EXPECT_EQ(n, live_at_end[0]);
  }
}

TEST(GeneratorPresets, TinyIsSmall) {
  const Trace t = generate_trace(preset("tiny"));
  EXPECT_LT(t.events.size(), 2000u);
  EXPECT_GT(t.events.size(), 500u);
  EXPECT_EQ(t.meta.at("generator").rfind("name=tiny ", 0), 0u);
}

TEST(GeneratorPresets, UnknownPresetIsAUsageError) {
  EXPECT_THROW(preset("llama-70b"), UsageError);
}

TEST(GeneratorDeterminism, SameSeedSameTraceOtherSeedOtherRouting) {
  EXPECT_EQ(generate_trace(preset("tiny")), generate_trace(preset("tiny")));
  GeneratorConfig c = reduced("qwen-moe");
  const Trace a = generate_trace(c);
  EXPECT_EQ(a, generate_trace(c));
  c.seed = 2;
  const Trace b = generate_trace(c);
  ASSERT_EQ(a.events.size(), b.events.size());
  bool differs = false;
  for (std::size_t i = 0; i < a.events.size(); ++i) differs |= a.events[i].size != b.events[i].size;
  EXPECT_TRUE(differs);
}

TEST(GeneratorMoe, ExpertBuffersAreDynamicAndVaryAcrossIterations) {
  GeneratorConfig c = reduced("qwen-moe");
  c.iterations = 3;
  const Trace t = generate_trace(c);
  std::vector<std::vector<std::uint64_t>> dynamic_sizes(3), static_sizes(3);
  for (const Event& e : t.events) {
    if (e.kind != EventKind::Alloc || e.phase == Phase::Other) continue;
    (e.dynamic ? dynamic_sizes : static_sizes)[e.iteration].push_back(e.size);
    if (e.dynamic) {
      EXPECT_TRUE(e.phase == Phase::Forward || e.phase == Phase::Backward);
      EXPECT_GE(e.layer, 0);
    }
  }
  EXPECT_FALSE(dynamic_sizes[1].empty());
  EXPECT_NE(dynamic_sizes[1], dynamic_sizes[2]);
  // Everything else repeats exactly from one iteration to the next.
  EXPECT_EQ(static_sizes[1], static_sizes[2]);
}

TEST(GeneratorMoe, RoutingCountsSumToTheAssignmentsAndAreSkewed) {
  GeneratorConfig c = preset("qwen-moe");
  const std::uint64_t assignments = 4096 * 4 * 4;
  const auto counts = gen::expert_token_counts(c, assignments, 1, 0, 3);
  ASSERT_EQ(counts.size(), 60u);
  std::uint64_t sum = 0;
  for (auto n : counts) sum += n;
  EXPECT_EQ(sum, assignments);
  const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  EXPECT_GT(*hi, 4 * *lo + 1);
  EXPECT_NE(counts, gen::expert_token_counts(c, assignments, 2, 0, 3));
}

TEST(GeneratorVarlen, ActivationSizesFollowEachIterationsSequenceLength) {
  GeneratorConfig c = reduced("llama7b-varlen");
  c.iterations = 4;
  const Trace t = generate_trace(c);
  const auto seqs = gen::iteration_sequence_lengths(c);
  ASSERT_EQ(seqs.size(), 4u);
  EXPECT_GT(std::set<std::uint64_t>(seqs.begin(), seqs.end()).size(), 1u);
  for (auto s : seqs) {
    EXPECT_GE(s, 512u);
    EXPECT_LE(s, 8192u);
  }
  // The first layer allocation of each iteration is the input norm's output [s/t, b, h] bf16.
  std::vector<std::uint64_t> first_layer_alloc(4, 0);
  for (const Event& e : t.events) {
    if (e.kind == EventKind::Alloc && e.layer >= 0 && e.phase == Phase::Forward && !first_layer_alloc[e.iteration]) {
      first_layer_alloc[e.iteration] = e.size;
    }
  }
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(first_layer_alloc[i], seqs[i] / c.tp * c.micro_batch * c.hidden * 2);
}

TEST(GeneratorVarlen, ExplicitSequenceList) {
  GeneratorConfig c = gpt_layer_config();
  c.iterations = 3;
  set_config_field(c, "seq-list", "64,128");
  EXPECT_EQ(gen::iteration_sequence_lengths(c), (std::vector<std::uint64_t>{64, 128, 64}));
  EXPECT_EQ(generate_trace(c).meta.at("sequence_lengths"), "64,128,64");
}

TEST(GeneratorConfigFields, EveryFieldRoundTripsThroughItsFlag) {
  GeneratorConfig c = preset("qwen-moe");
  c.seq_list = {256, 512};
  c.cp = 2;  // fields left out at their defaults are described once set
  c.doc_min = 128;
  c.doc_max = 512;
  GeneratorConfig parsed;
  parsed.name = c.name;
  const std::string described = describe_config(c);
  std::size_t pos = described.find(' ') + 1;  // skip name=
  while (pos < described.size()) {
    std::size_t end = described.find(' ', pos);
    if (end == std::string::npos) end = described.size();
    const std::string kv = described.substr(pos, end - pos);
    const std::size_t eq = kv.find('=');
    set_config_field(parsed, kv.substr(0, eq), kv.substr(eq + 1));
    pos = end + 1;
  }
  EXPECT_EQ(describe_config(parsed), described);
  EXPECT_EQ(config_field_names().size(), static_cast<std::size_t>(std::count(described.begin(), described.end(), ' ')));
}

TEST(GeneratorConfigFields, LongContextFieldsAreLeftOutAtTheirDefaults) {
  // Traces generated before context parallelism and packed documents describe themselves as
  // before: the new fields appear only when set.
  const std::string described = describe_config(preset("llama7b-tp2pp2-r"));
  EXPECT_EQ(described.find(" cp="), std::string::npos);
  EXPECT_EQ(described.find(" doc-min="), std::string::npos);
  const std::string long_context = describe_config(preset("llama3-8b-64k-packed"));
  EXPECT_NE(long_context.find(" cp=4"), std::string::npos);
  EXPECT_NE(long_context.find(" doc-min=512 doc-max=32768"), std::string::npos);
}

TEST(GeneratorConfigFields, BadFlagsAndInconsistentConfigsAreUsageErrors) {
  GeneratorConfig c;
  EXPECT_THROW(set_config_field(c, "no-such-field", "1"), UsageError);
  EXPECT_THROW(set_config_field(c, "micro-batch", "two"), UsageError);
  EXPECT_THROW(set_config_field(c, "recompute", "some"), UsageError);
  EXPECT_THROW(set_config_field(c, "flash-attention", "maybe"), UsageError);
  set_config_field(c, "micro_batch", "2");  // underscores work too
  EXPECT_EQ(c.micro_batch, 2u);

  GeneratorConfig bad = gpt_layer_config();
  bad.tp = 3;
  EXPECT_THROW(generate_trace(bad), UsageError);
  bad = gpt_layer_config();
  bad.vpp = 2;  // without --schedule interleaved
  EXPECT_THROW(validate_config(bad), UsageError);
  bad = gpt_layer_config();
  bad.global_batch = 3;
  EXPECT_THROW(validate_config(bad), UsageError);
  bad = preset("qwen-moe");
  bad.top_k = 61;
  EXPECT_THROW(validate_config(bad), UsageError);
  // Context parallelism: two chunks per CP rank, each split over tp under SP; flash attention.
  bad = preset("llama3-8b-128k-cp8");
  bad.seq_len = 131072 + 32;  // a multiple of tp * cp, not of 2 * cp * tp = 64
  EXPECT_THROW(validate_config(bad), UsageError);
  bad.seq_len = 131072 + 64;
  EXPECT_NO_THROW(validate_config(bad));
  bad.flash_attention = false;
  EXPECT_THROW(validate_config(bad), UsageError);
  bad = preset("llama3-8b-64k-packed");
  bad.doc_min = bad.doc_max + 1;
  EXPECT_THROW(validate_config(bad), UsageError);
}

TEST(GeneratorFlops, MatchesTheHandComputedFormula) {
  GeneratorConfig c;
  c.hidden = 1024;
  c.ffn = 4096;
  c.heads = 16;
  c.kv_heads = 16;
  c.layers = 4;
  c.vocab = 1000;
  c.swiglu = false;
  c.micro_batch = 1;
  c.global_batch = 2;
  // Per token and layer: 2*h*h*4 + 4*s*h = 8912896 (attention), 4*h*f = 16777216 (GeLU MLP);
  // four layers plus the output layer 2*h*V = 2048000; 256 tokens; forward + backward = 3 passes.
  EXPECT_DOUBLE_EQ(flops_per_iteration(c, 128), 3.0 * 256 * (4.0 * (8912896 + 16777216) + 2048000));
  c.tp = 2;
  c.recompute = RecomputeKind::Full;
  EXPECT_DOUBLE_EQ(flops_per_iteration(c, 128), 4.0 * 256 * (4.0 * (8912896 + 16777216) + 2048000) / 2);
  // A first pipeline stage of two holds half the layers and no output layer.
  c.pp = 2;
  c.global_batch = 2;
  EXPECT_DOUBLE_EQ(flops_per_iteration(c, 128), 4.0 * 256 * (2.0 * (8912896 + 16777216)) / 2);
}

TEST(GeneratorFlops, ContextParallelRanksShareTheTokens) {
  // Each CP rank runs s/cp tokens, each attending over the whole sequence: 1/cp of the FLOPs.
  GeneratorConfig c = preset("llama3-8b-128k-cp8");
  const double per_rank = flops_per_iteration(c, 131072);
  c.cp = 1;
  EXPECT_DOUBLE_EQ(per_rank * 8, flops_per_iteration(c, 131072));
}

TEST(GeneratorFlops, TheTraceCarriesTheMeanOverIterations) {
  GeneratorConfig c = gpt_layer_config();
  c.iterations = 3;
  set_config_field(c, "seq-list", "64,128");
  const double mean = (2 * flops_per_iteration(c, 64) + flops_per_iteration(c, 128)) / 3;
  EXPECT_NEAR(std::stod(generate_trace(c).meta.at("flops_per_iteration")), mean, mean * 1e-5);
}

// A small context-parallel model: h 256, 4 heads, 2 KV heads (grouped), SwiGLU ffn 512, RoPE,
// RMSNorm, s 1024 over cp 4 (256 tokens per rank), b 2, no tensor parallelism.
GeneratorConfig cp_layer_config() {
  GeneratorConfig c;
  c.hidden = 256;
  c.ffn = 512;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 4;
  c.vocab = 512;
  c.seq_len = 1024;
  c.micro_batch = 2;
  c.global_batch = 2;
  c.cp = 4;
  c.attention_mask_in_dataloader = false;
  c.iterations = 1;
  return c;
}

TEST(GeneratorContextParallel, LayerSavesTheLastRingBlockAndItsStatistics) {
  const GeneratorConfig c = cp_layer_config();
  const std::uint64_t tokens = 1024 / 4 * 2;            // s/cp * b
  const std::uint64_t act = tokens * 256 * 2;           // [s/cp, b, h] bf16
  const std::uint64_t q = act, kv = tokens * 2 * 64 * 2;  // 2 KV heads of 64
  const std::uint64_t lse = 2 * 4 * 256 * 4;            // [b, heads, s/cp] fp32
  const std::uint64_t rstd = tokens * 4;
  // Input, norm outputs and statistics, residual; TE's saved Q copy, the last K/V block (one
  // of the cp ring buffers), the merged output and log-sum-exp, 4 RNG states; the context;
  // SwiGLU's fc1 output, silu and product.
  const std::uint64_t expected = act * 4 + rstd * 2 + q + 2 * kv + q + lse + 4 * 16 + q +
                                 tokens * 1024 * 2 + tokens * 512 * 2 * 2;
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 1), expected);
}

TEST(GeneratorContextParallel, RingBuffersInTheForwardDoubleBuffersInTheBackward) {
  // Sizes chosen so that no other tensor of the layer has the ring's: h 384, 6 heads of 64,
  // 2 KV heads, ffn 640.
  GeneratorConfig c = cp_layer_config();
  c.hidden = 384;
  c.heads = 6;
  c.ffn = 640;
  const std::uint64_t kv = 1024 / 4 * 2 * 2 * 64 * 2;
  const Trace t = generate_trace(c);
  std::size_t forward_blocks = 0, backward_buffers = 0;
  for (const Event& e : t.events) {
    if (e.kind != EventKind::Alloc || e.layer != 1) continue;
    if (e.phase == Phase::Forward && e.size == 2 * kv) ++forward_blocks;
    if (e.phase == Phase::Backward && e.size == 4 * kv) ++backward_buffers;
  }
  EXPECT_EQ(forward_blocks, 4u);    // its own K, V and cp - 1 received blocks
  EXPECT_EQ(backward_buffers, 2u);  // [K V, dK dV] twice
  EXPECT_EQ(validate_trace(t), "");
}

TEST(GeneratorContextParallel, FullRecomputeKeepsOnlyTheCheckpoint) {
  GeneratorConfig c = cp_layer_config();
  c.recompute = RecomputeKind::Full;
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 1), 1024u / 4 * 2 * 256 * 2);
}

TEST(GeneratorContextParallel, SelectiveRecomputeSavesTheCheckpointedQKV) {
  // Megatron-core's checkpoint of the core attention keeps its inputs (the rotated Q, K and the
  // QKV output V is a view of) instead of TE's Q copy, K/V block, output, statistics and RNG.
  GeneratorConfig c = cp_layer_config();
  const std::uint64_t none = saved_bytes_of_layer(generate_trace(c), 1);
  c.recompute = RecomputeKind::Selective;
  const std::uint64_t tokens = 1024 / 4 * 2, q = tokens * 256 * 2, kv = tokens * 128 * 2;
  const std::uint64_t lse = 2 * 4 * 256 * 4;
  EXPECT_EQ(saved_bytes_of_layer(generate_trace(c), 1), none - (q + 2 * kv + q + lse + 4 * 16) + (q + kv + q + 2 * kv));
}

TEST(GeneratorContextParallel, BatchIsSplitAndRotaryFrequenciesTooAndOptimizerShardsOverDpTimesCp) {
  GeneratorConfig c = cp_layer_config();
  c.distributed_optimizer = true;
  const Trace t = generate_trace(c);
  auto has = [&](std::uint64_t size, Phase phase) {
    return std::any_of(t.events.begin(), t.events.end(), [&](const Event& e) {
      return e.kind == EventKind::Alloc && e.size == size && e.phase == phase;
    });
  };
  EXPECT_TRUE(has(1024 * 2 * 8, Phase::Forward));    // tokens of the whole sequence
  EXPECT_TRUE(has(256 * 2 * 8, Phase::Forward));     // this rank's quarter
  EXPECT_TRUE(has(1024 * 64 * 4, Phase::Forward));   // rotary [s, d] fp32
  EXPECT_TRUE(has(256 * 64 * 4, Phase::Forward));    // its chunks
  // The same persistent allocations as 4 data-parallel ranks without context parallelism.
  GeneratorConfig dp = c;
  dp.cp = 1;
  dp.dp = 4;
  dp.global_batch = 8;
  auto persistent = [](const Trace& x) {
    std::vector<std::uint64_t> sizes;
    for (const Event& e : x.events) {
      if (e.phase != Phase::Other) break;
      sizes.push_back(e.size);
    }
    return sizes;
  };
  EXPECT_EQ(persistent(t), persistent(generate_trace(dp)));
}

TEST(GeneratorPacked, OnlyTheCuSeqlensChangeAcrossMicroBatches) {
  GeneratorConfig c = cp_layer_config();
  c.doc_min = 16;
  c.doc_max = 512;
  c.global_batch = 8;
  c.micro_batch = 1;
  c.iterations = 3;
  const Trace t = generate_trace(c);
  EXPECT_EQ(validate_trace(t), "");
  std::vector<std::vector<std::uint64_t>> dynamic_sizes(3), static_sizes(3);
  for (const Event& e : t.events) {
    if (e.kind != EventKind::Alloc || e.phase == Phase::Other) continue;
    (e.dynamic ? dynamic_sizes : static_sizes)[e.iteration].push_back(e.size);
    if (e.dynamic) {
      EXPECT_EQ(e.size % 4, 0u);
    }
  }
  // Total tokens are fixed: every other size repeats exactly.
  EXPECT_EQ(static_sizes[1], static_sizes[2]);
  EXPECT_NE(dynamic_sizes[1], dynamic_sizes[2]);
  for (std::uint64_t mb = 0; mb < 8; ++mb) {
    const std::uint64_t docs = gen::document_count(c, 1024, 1, mb);
    EXPECT_GE(docs, 2u);  // 1024 tokens in documents of at most 512
    EXPECT_LE(docs, 1024u / 16);
  }
}

TEST(GeneratorLongContext, PresetsAreLongAndContextParallel) {
  for (const char* name : {"llama3-8b-64k-cp4", "llama3-8b-64k-cp4-sel", "llama3-8b-64k-packed",
                           "llama3-8b-128k-cp8", "llama3-8b-128k-cp8-r", "llama3-8b-varlen-128k"}) {
    SCOPED_TRACE(name);
    const GeneratorConfig c = preset(name);
    EXPECT_GT(c.cp, 1u);
    EXPECT_GE(std::max(c.seq_len, c.seq_max), 65536u);
    EXPECT_NO_THROW(validate_config(c));
  }
  const auto seqs = gen::iteration_sequence_lengths(preset("llama3-8b-varlen-128k"));
  for (auto s : seqs) EXPECT_EQ(s % 64, 0u);  // 2 * cp * tp
  EXPECT_GT(std::set<std::uint64_t>(seqs.begin(), seqs.end()).size(), 4u);
}

}  // namespace
}  // namespace stalloc
