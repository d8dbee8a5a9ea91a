# torchrun --nproc_per_node=2 examples/torchrun_ddp.py
# DistributedDataParallel under torchrun: each rank enables stalloc before set_device (which
# initialises CUDA), so every rank runs its own allocator; saved files get a .rankN suffix.
import os

import torch
import torch.distributed as dist

import stalloc

stalloc.enable()  # first: set_device below initialises CUDA
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2048, 2048).cuda(), device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for _ in range(30):
    model(torch.randn(128, 2048, device="cuda")).sum().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stalloc.step()
stalloc.save_trace("/tmp/stalloc-ddp.trace")  # /tmp/stalloc-ddp.trace.rankN: stalloc inspect reads it
dist.destroy_process_group()
