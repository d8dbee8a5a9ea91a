#include "tools/capture/block_checkpoint.h"

namespace stalloc::capture {

namespace {

// Carries the block from forward to backward through the autograd context.
struct BlockHandle : torch::CustomClassHolder {
  explicit BlockHandle(TransformerBlockImpl* b) : block(b) {}
  TransformerBlockImpl* block;
};

class BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& mask, TransformerBlockImpl* block) {
    ctx->save_for_backward({x, mask});
    ctx->saved_data["block"] = c10::IValue::make_capsule(c10::make_intrusive<BlockHandle>(block));
    torch::NoGradGuard no_grad;
    return block->forward(x, mask);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto handle = c10::static_intrusive_pointer_cast<BlockHandle>(ctx->saved_data["block"].toCapsule());
    torch::Tensor input = saved[0].detach().requires_grad_(true);
    torch::Tensor output;
    {
      torch::AutoGradMode with_grad(true);
      output = handle->block->forward(input, saved[1]);
    }
    torch::autograd::backward({output}, {grad_outputs[0]});
    return {input.grad(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint_block(TransformerBlockImpl& block, const torch::Tensor& x,
                               const torch::Tensor& mask) {
  return BlockCheckpoint::apply(x, mask, &block);
}

}  // namespace stalloc::capture
