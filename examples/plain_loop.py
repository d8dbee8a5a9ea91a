# python examples/plain_loop.py
# A plain loop: stalloc becomes PyTorch's allocator before the first CUDA tensor, and
# stalloc.step() runs after each optimizer step.
import torch

import stalloc

stalloc.integrations.ensure_enabled()  # before anything touches CUDA
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
with stalloc.integrations.training(optimizer):
    for _ in range(50):
        batch = torch.randn(64, 1024, device="cuda")
        loss = model(batch).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
print(stalloc.stats()["devices"]["0"]["plan_installs"], "plans installed;",
      torch.cuda.max_memory_reserved() / 2**20, "MiB reserved at most")
