# python examples/megatron_style.py
# A Megatron-style step: several micro-batches (forward and backward each, gradients
# accumulated), then one optimizer step. The iteration stalloc plans is the whole step: call
# stalloc.step() after the optimizer step, not after each micro-batch.
import torch

import stalloc

stalloc.enable()
layers = torch.nn.ModuleList(torch.nn.Linear(2048, 2048) for _ in range(8)).cuda()
optimizer = torch.optim.AdamW(layers.parameters(), lr=1e-4)
micro_batches = 4
for _ in range(20):
    for _ in range(micro_batches):
        x = torch.randn(16, 256, 2048, device="cuda")
        for layer in layers:
            x = torch.nn.functional.gelu(layer(x))
        (x.float().square().mean() / micro_batches).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stalloc.step()  # one iteration: every micro-batch of this step
print(stalloc.stats()["devices"]["0"]["plan_installs"], "plans installed")
