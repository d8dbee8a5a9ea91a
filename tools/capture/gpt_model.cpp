#include "tools/capture/gpt_model.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "tools/capture/block_checkpoint.h"

namespace stalloc::capture {

CausalSelfAttentionImpl::CausalSelfAttentionImpl(std::int64_t hidden, std::int64_t heads)
    : heads_(heads),
      qkv_(register_module("qkv", torch::nn::Linear(hidden, 3 * hidden))),
      proj_(register_module("proj", torch::nn::Linear(hidden, hidden))) {}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const std::int64_t batch = x.size(0);
  const std::int64_t seq = x.size(1);
  const std::int64_t hidden = x.size(2);
  const std::int64_t head_dim = hidden / heads_;
  // [batch, seq, 3 * hidden] -> three [batch, heads, seq, head_dim] views.
  torch::Tensor qkv = qkv_(x).view({batch, seq, 3, heads_, head_dim}).permute({2, 0, 3, 1, 4});
  torch::Tensor q = qkv[0];
  torch::Tensor k = qkv[1];
  torch::Tensor v = qkv[2];
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  torch::Tensor probs = torch::softmax(scores, -1);
  torch::Tensor context = torch::matmul(probs, v).transpose(1, 2).reshape({batch, seq, hidden});
  return proj_(context);
}

TransformerBlockImpl::TransformerBlockImpl(std::int64_t hidden, std::int64_t heads)
    : ln_attn_(register_module("ln_attn", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
      attn_(register_module("attn", CausalSelfAttention(hidden, heads))),
      ln_mlp_(register_module("ln_mlp", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
      fc_in_(register_module("fc_in", torch::nn::Linear(hidden, 4 * hidden))),
      fc_out_(register_module("fc_out", torch::nn::Linear(4 * hidden, hidden))) {}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  torch::Tensor h = x + attn_(ln_attn_(x), mask);
  return h + fc_out_(torch::gelu(fc_in_(ln_mlp_(h))));
}

GptModelImpl::GptModelImpl(const GptConfig& config)
    : config_(config),
      token_embedding_(register_module("token_embedding", torch::nn::Embedding(config.vocab, config.hidden))),
      position_embedding_(
          register_module("position_embedding", torch::nn::Embedding(config.max_seq_len, config.hidden))),
      ln_final_(nullptr),
      head_(nullptr) {
  if (config.heads <= 0 || config.hidden % config.heads != 0) {
    throw std::invalid_argument("hidden (" + std::to_string(config.hidden) +
                                ") must be a multiple of heads (" + std::to_string(config.heads) + ")");
  }
  for (std::int64_t i = 0; i < config.layers; ++i) {
    blocks_.push_back(register_module("block" + std::to_string(i), TransformerBlock(config.hidden, config.heads)));
  }
  ln_final_ = register_module("ln_final", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden})));
  head_ = register_module("head", torch::nn::Linear(config.hidden, config.vocab));
}

void GptModelImpl::set_layer_observer(LayerObserver observer) { observer_ = std::move(observer); }

void GptModelImpl::observe(std::int32_t layer) const {
  if (observer_) observer_(layer);
}

torch::Tensor GptModelImpl::forward(const torch::Tensor& tokens) {
  const std::int64_t seq = tokens.size(1);
  if (seq > config_.max_seq_len) {
    throw std::invalid_argument("sequence length " + std::to_string(seq) + " exceeds the model's " +
                                std::to_string(config_.max_seq_len));
  }
  // Marks the gradient of x's producer as the start of `layer`'s backward.
  auto on_backward = [this](const torch::Tensor& x, std::int32_t layer) {
    if (x.requires_grad()) x.register_hook([this, layer](const torch::Tensor&) { observe(layer); });
  };
  observe(-1);
  torch::Tensor positions = torch::arange(seq, torch::kLong);
  torch::Tensor x = token_embedding_(tokens) + position_embedding_(positions);
  torch::Tensor causal_mask = torch::ones({seq, seq}, torch::kBool).triu(1);
  on_backward(x, -1);
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const auto layer = static_cast<std::int32_t>(i);
    observe(layer);
    x = config_.recompute ? checkpoint_block(*blocks_[i], x, causal_mask) : blocks_[i]->forward(x, causal_mask);
    on_backward(x, layer);
  }
  observe(-1);
  return head_(ln_final_(x));
}

}  // namespace stalloc::capture
