// A small decoder-only transformer (GPT-style, pre-LayerNorm) built from torch::nn modules, whose
// only job is to allocate and free tensors in the order real training does.
//
// The model reports which layer is running to a LayerObserver: in forward before each block
// (and -1 for the embedding and the head), in backward through gradient hooks on the block
// outputs, which fire when a block's output gradient is complete, i.e. just before that block's
// backward. With recompute, each block runs through a checkpoint (block_checkpoint.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace stalloc::capture {

using LayerObserver = std::function<void(std::int32_t layer)>;

struct GptConfig {
  std::int64_t vocab = 1024;
  std::int64_t hidden = 256;
  std::int64_t heads = 4;
  std::int64_t layers = 4;
  std::int64_t max_seq_len = 128;
  bool recompute = false;
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(std::int64_t hidden, std::int64_t heads);
  // x: [batch, seq, hidden]; mask: [seq, seq], true above the diagonal (future positions).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

 private:
  std::int64_t heads_;
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear proj_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(std::int64_t hidden, std::int64_t heads);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

 private:
  torch::nn::LayerNorm ln_attn_{nullptr};
  CausalSelfAttention attn_{nullptr};
  torch::nn::LayerNorm ln_mlp_{nullptr};
  torch::nn::Linear fc_in_{nullptr};
  torch::nn::Linear fc_out_{nullptr};
};
TORCH_MODULE(TransformerBlock);

class GptModelImpl : public torch::nn::Module {
 public:
  explicit GptModelImpl(const GptConfig& config);
  void set_layer_observer(LayerObserver observer);
  // tokens: [batch, seq] int64 -> logits [batch, seq, vocab].
  torch::Tensor forward(const torch::Tensor& tokens);

 private:
  void observe(std::int32_t layer) const;

  GptConfig config_;
  LayerObserver observer_;
  torch::nn::Embedding token_embedding_{nullptr};
  torch::nn::Embedding position_embedding_{nullptr};
  std::vector<TransformerBlock> blocks_;
  torch::nn::LayerNorm ln_final_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(GptModel);

}  // namespace stalloc::capture
