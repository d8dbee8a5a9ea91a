// Long context: context parallelism and packed documents, as Megatron-core runs them with
// Transformer Engine (docs/workloads.md, "Long context").
//
// Context parallelism (--context-parallel-size cp, cp_comm_type p2p): the sequence is cut into
// 2*cp chunks and CP rank r keeps chunks r and 2*cp-1-r, so every activation of the layer is s/cp
// tokens long; attention is TE's AttnFuncWithCPAndKVP2P, a ring: in cp steps each rank sends the
// K and V it holds to the next rank and receives the previous rank's, computing attention of its
// queries against each block as it arrives (flash-attn kernels), then merges the per-step outputs
// with their log-sum-exp statistics. The generator traces CP rank 0, whose steps 1..cp-1 need only
// the second half of its queries (causal masking: the upper triangle of the cp x cp block matrix).
//
// Packed documents (TE's thd format): the micro-batch is documents laid end to end, described by
// cu_seqlens (int32 [docs + 1]); sizes follow the total tokens, fixed, except the cu_seqlens
// tensors, whose length is the number of documents (marked dynamic).
#include <vector>

#include "workload/generator_model.h"

namespace stalloc::gen {

namespace {
constexpr std::uint64_t kFp32 = 4;
constexpr std::uint64_t kInt32 = 4;
constexpr std::uint64_t kInt64 = 8;
constexpr std::uint64_t kRngState = 2 * kInt64;  // flash-attn's philox seed and offset
constexpr std::uint64_t kCpRank = 0;             // the traced context-parallel rank
}  // namespace

void ModelEmitter::load_batch_cp(StageState& st, bool first, bool last, Tensor* labels, Tensor* position_ids) {
  const bool packed = cfg_.doc_max > 0;
  const std::uint64_t cu = (st.docs + 1) * kInt32;
  if (packed) {
    // The packed batch's boundaries: cu_seqlens, and with context parallelism the same padded to
    // multiples of 2*cp per document (what TE partitions by).
    st.cu_seqlens = b_.alloc(cu, true);
    if (d_.cp > 1) st.cu_seqlens_padded = b_.alloc(cu, true);
  }
  const std::uint64_t full = d_.s_full * d_.b, local = d_.tokens;
  const bool mask = (first || last) && (cfg_.attention_mask_in_dataloader || !cfg_.flash_attention) && !packed;
  // get_batch_on_this_tp_rank: the whole sequence, in the dictionary's order.
  Tensor tokens = first ? b_.alloc(full * kInt64) : 0;
  Tensor lab = last ? b_.alloc(full * kInt64) : 0;
  Tensor loss_mask = last ? b_.alloc(full * kFp32) : 0;
  Tensor attention_mask = mask ? b_.alloc(d_.b * d_.s_full * d_.s_full) : 0;
  Tensor positions = first ? b_.alloc(full * kInt64) : 0;
  if (d_.cp == 1) {  // packed documents without context parallelism: nothing to split
    st.tokens = tokens;
    *labels = lab;
    st.loss_mask = loss_mask;
    st.attention_mask = attention_mask;
    *position_ids = positions;
    return;
  }
  // get_batch_on_this_cp_rank: per tensor, index_select of this rank's two chunks (a 2-element
  // index each time); packed, one index of the rank's tokens (thd_get_partitioned_indices).
  Tensor index = packed ? b_.alloc(local * kInt32) : 0;
  auto keep = [&](Tensor& whole, std::uint64_t bytes) -> Tensor {
    if (whole == 0) return 0;
    Tensor pair = packed ? 0 : b_.alloc(2 * kInt64);
    Tensor mine = b_.alloc(bytes);
    b_.free(whole);
    b_.free(pair);
    return mine;
  };
  st.tokens = keep(tokens, local * kInt64);
  *labels = keep(lab, local * kInt64);
  st.loss_mask = keep(loss_mask, local * kFp32);
  st.attention_mask = keep(attention_mask, d_.b * d_.s * d_.s_full);
  *position_ids = keep(positions, local * kInt64);
  b_.free(index);
}

AttentionCore ModelEmitter::cp_attention_forward(bool grad) {
  AttentionCore c;
  const std::uint64_t cp = d_.cp;
  const bool packed = cfg_.doc_max > 0;
  const std::uint64_t cu = (docs_ + 1) * kInt32;
  // TE's FlashAttention makes Q, K, V contiguous [b, s/cp, heads, d] copies; Q is saved.
  c.q = b_.alloc(d_.q);
  c.k = b_.alloc(d_.kv);
  c.v = b_.alloc(d_.kv);
  if (packed) {  // cu_seqlens_{q,kv}_padded // cp
    c.small.push_back(b_.alloc(cu, true));
    c.small.push_back(b_.alloc(cu, true));
  }
  std::vector<Tensor> ring(cp, 0), outs(cp, 0), lses(cp, 0);
  ring[0] = b_.alloc(2 * d_.kv);  // torch.cat((k.view(-1), v.view(-1))): the block this rank sends first
  for (std::uint64_t i = 0; i < cp; ++i) {
    if (i + 1 < cp) ring[i + 1] = b_.alloc(2 * d_.kv);  // empty_like: the block to receive
    // Step 0 is the diagonal block (all queries, all keys, causal); steps i <= rank the lower
    // triangle (all queries, first half of the keys); steps i > rank the upper (second half of
    // the queries, all keys).
    const bool all_q = i == 0 || i <= kCpRank;
    const bool all_kv = i == 0 || i > kCpRank;
    if (packed) {  // cu_seqlens_q_per_step[i], cu_seqlens_kv_per_step[i]
      c.small.push_back(b_.alloc(cu, true));
      c.small.push_back(b_.alloc(cu, true));
    }
    // Packed, the halves are read into new tensors (tex.thd_read_half_tensor); unpacked they
    // are views.
    Tensor q_half = packed && !all_q ? b_.alloc(d_.q / 2) : 0;
    Tensor k_half = packed && !all_kv ? b_.alloc(d_.kv / 2) : 0;
    Tensor v_half = packed && !all_kv ? b_.alloc(d_.kv / 2) : 0;
    outs[i] = b_.alloc(all_q ? d_.q : d_.q / 2);      // out_per_step[i]
    lses[i] = b_.alloc(all_q ? d_.lse : d_.lse / 2);  // softmax_lse_per_step[i], fp32
    c.small.push_back(b_.alloc(kRngState));            // rng_states[i]
    b_.free(q_half);
    b_.free(k_half);
    b_.free(v_half);
    // The statistics are merged one step behind: at step 1 step 0's are cloned into the running
    // softmax_lse (the later merges are in place).
    if (i == 1) c.lse = b_.alloc(d_.lse);
  }
  c.flash_out = b_.alloc(d_.q);  // the merged output (per-step outputs rescaled into it)
  // AttnFuncWithCPAndKVP2P.forward returns: its lists die, but for the last received block,
  // which it saves (with q, out, softmax_lse and the RNG states).
  for (std::uint64_t i = 0; i < cp; ++i) {
    b_.free(outs[i]);
    b_.free(lses[i]);
    if (i + 1 < cp) b_.free(ring[i]);
  }
  c.kv = ring[cp - 1];
  c.out = b_.alloc(d_.q);  // transposed back to [s/cp, b, h/t]
  // FlashAttention.forward returns: its contiguous K and V copies were not saved.
  b_.free(c.k);
  b_.free(c.v);
  if (!grad) {  // under no_grad nothing keeps the context's saved tensors
    b_.free(c.q);
    b_.free(c.kv);
    b_.free(c.flash_out);
    b_.free(c.lse);
    for (Tensor& t : c.small) b_.free(t);
    c.small.clear();
  }
  return c;
}

void ModelEmitter::cp_core_backward(AttentionCore& c, Tensor& d_out, bool free_out, Tensor* dq, Tensor* dkv) {
  const std::uint64_t cp = d_.cp;
  const bool packed = cfg_.doc_max > 0;
  // The context gradient reaches TE as a transposed view: made contiguous.
  Tensor d_flash_out = b_.alloc(d_.q);
  b_.free(d_out);
  if (free_out) b_.free(c.out);
  // Causal, on every rank but the last: the second half of the statistics, made contiguous.
  Tensor lse_half = kCpRank + 1 < cp ? b_.alloc(d_.lse / 2) : 0;
  *dq = b_.alloc(d_.q);  // dq = empty_like(q): the steps' dQ are added into it
  // The double buffers of the backward ring: [2, 2 * kv] each, K and V received and the dK, dV
  // accumulated so far, sent on together.
  Tensor buffers[2] = {b_.alloc(4 * d_.kv), b_.alloc(4 * d_.kv)};
  for (std::uint64_t i = 0; i < cp; ++i) {
    const std::uint64_t step = cp - 1 - i;  // the forward's steps in reverse
    const bool all_q = step == 0 || step <= kCpRank;
    const bool all_kv = step == 0 || step > kCpRank;
    const std::uint64_t q_bytes = all_q ? d_.q : d_.q / 2;
    const std::uint64_t kv_bytes = all_kv ? d_.kv : d_.kv / 2;
    std::vector<Tensor> halves;
    if (packed && !all_q) {  // q, out, dout halves read into new tensors
      for (int k = 0; k < 3; ++k) halves.push_back(b_.alloc(q_bytes));
    }
    if (packed && !all_kv) {
      for (int k = 0; k < 2; ++k) halves.push_back(b_.alloc(kv_bytes));
    }
    Tensor dq_step = b_.alloc(q_bytes);       // dq_ = empty_like(q_)
    Tensor dkv_step = b_.alloc(2 * kv_bytes);  // dkv_ = empty_like(kv_)
    // flash-attn's backward: fp32 dQ accumulator and softmax_d; with grouped-query attention dK
    // and dV per query head before they are summed per group.
    Tensor accum = b_.alloc(q_bytes / 2 * kFp32);
    Tensor softmax_d = b_.alloc(all_q ? d_.lse : d_.lse / 2);
    if (d_.kv_local < d_.heads_local) {
      const std::uint64_t expanded = kv_bytes / d_.kv_local * d_.heads_local;
      Tensor dk_expanded = b_.alloc(expanded);
      Tensor dv_expanded = b_.alloc(expanded);
      b_.free(dk_expanded);
      b_.free(dv_expanded);
    }
    b_.free(accum);
    b_.free(softmax_d);
    for (Tensor& t : halves) b_.free(t);
    b_.free(dq_step);   // added into dq
    b_.free(dkv_step);  // added into the buffer's dK, dV
  }
  b_.free(lse_half);
  b_.free(d_flash_out);
  b_.free(c.q);
  b_.free(c.kv);
  b_.free(c.flash_out);
  b_.free(c.lse);
  for (Tensor& t : c.small) b_.free(t);
  c.small.clear();
  // The last step's dK, dV are in buffers[cp % 2]: returned as views of it, the other dies.
  b_.free(buffers[(cp + 1) % 2]);
  *dkv = buffers[cp % 2];
}

}  // namespace stalloc::gen
