// Activation recomputation ("full recompute") for one transformer block.
//
// libtorch 1.13's C++ API has no checkpoint, so this is the reentrant scheme of
// torch.utils.checkpoint written as a custom autograd Function: forward runs the block without
// autograd and saves only its input; backward re-runs the block with autograd on a detached copy
// of the input and back-propagates through it, which accumulates the parameter gradients and
// yields the input gradient. The block must not be random (no dropout): the recomputed
// activations have to be the ones the forward used.
#pragma once

#include <torch/torch.h>

#include "tools/capture/gpt_model.h"

namespace stalloc::capture {

torch::Tensor checkpoint_block(TransformerBlockImpl& block, const torch::Tensor& x,
                               const torch::Tensor& mask);

}  // namespace stalloc::capture
