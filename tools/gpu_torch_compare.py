#!/usr/bin/env python3
"""Trains a small decoder-only transformer on a GPU under one allocator and prints its figures.

    python3 tools/gpu_torch_compare.py --allocator default|expandable|stalloc [--json OUT]

Each allocator needs a fresh process (PyTorch's allocator is chosen before the first CUDA
tensor), so tools/gpu_check.sh runs this script once per allocator and compares the JSON it
writes: peak reserved, peak allocated, utilization, the median iteration time and the loss of
every iteration. The model has random weights and random tokens (nothing is downloaded);
sequence lengths vary per iteration and the blocks use activation checkpointing, the two things
that make PyTorch's caching allocator fragment. The batch comes from a side stream, so that
stalloc's record_stream and its ordering of memory between streams run on the GPU too.
"""

import argparse
import json
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--allocator", choices=["default", "expandable", "stalloc"], required=True)
    p.add_argument("--stalloc-conf", default="backend:cuda,mode:alias")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-lens", default="512,1024,768,2048,1024,1536")
    p.add_argument("--iterations", type=int, default=36)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="write the figures to this file")
    return p.parse_args()


def main():
    args = parse_args()
    if args.allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if args.allocator == "stalloc":
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "torch_ext", "python"))
        import stalloc

        stalloc.enable(args.stalloc_conf)
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(args.seed)
    device = torch.device("cuda")

    class Block(nn.Module):
        def __init__(self, h, heads):
            super().__init__()
            self.ln1 = nn.LayerNorm(h)
            self.attn = nn.MultiheadAttention(h, heads, batch_first=True)
            self.ln2 = nn.LayerNorm(h)
            self.mlp = nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))

        def forward(self, x, mask):
            y = self.ln1(x)
            x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(args.vocab, args.hidden)
            self.blocks = nn.ModuleList(Block(args.hidden, args.heads) for _ in range(args.layers))
            self.head = nn.Linear(args.hidden, args.vocab, bias=False)

        def forward(self, tokens):
            s = tokens.shape[1]
            # Boolean (True: may not attend): attention converts it to the query's dtype, where a
            # float32 mask beside bf16 activations is refused by some attention kernels.
            mask = torch.ones((s, s), dtype=torch.bool, device=tokens.device).triu(diagonal=1)
            x = self.embed(tokens)
            for block in self.blocks:
                x = checkpoint(block, x, mask, use_reentrant=False)
            return self.head(x)

    model = Model().to(device=device, dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    seqs = [int(s) for s in args.seq_lens.split(",")]
    times = []
    losses = []
    # The batch is made on a side stream, as a data loader's prefetch would, and handed to the
    # training stream with record_stream: the allocator must not give its memory to the side
    # stream's next batch before the training stream is done with it.
    side = torch.cuda.Stream()
    for it in range(args.iterations):
        s = seqs[it % len(seqs)]
        with torch.cuda.stream(side):
            tokens = torch.randint(0, args.vocab, (args.batch, s + 1), device=device)
        torch.cuda.current_stream().wait_stream(side)
        tokens.record_stream(torch.cuda.current_stream())
        torch.cuda.synchronize()
        start = time.perf_counter()
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.allocator == "stalloc":
            stalloc.step()  # timed: installing a plan is part of what stalloc costs
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())

    if args.allocator == "stalloc":
        s = stalloc.stats()["devices"]["0"]
        peak_reserved, peak_allocated = s["peak_reserved_bytes"], s["peak_allocated_bytes"]
        extra = {k: s[k] for k in ("matches", "misses", "conflicts", "plan_installs", "vmm_calls", "live_mappings")}
        extra["stalloc_conf"] = args.stalloc_conf
    else:
        peak_reserved = torch.cuda.max_memory_reserved()
        peak_allocated = torch.cuda.max_memory_allocated()
        extra = {}
    steady = times[len(times) // 3:]
    result = {
        "allocator": args.allocator,
        "peak_reserved_bytes": peak_reserved,
        "peak_allocated_bytes": peak_allocated,
        "utilization": peak_allocated / peak_reserved if peak_reserved else 0.0,
        "median_iteration_ms": 1000 * statistics.median(steady),
        "iterations": args.iterations,
        # Same seed, weights and tokens under every allocator: a tensor whose memory another
        # one overwrote shows here (gpu_check.sh compares them against the default allocator's).
        "losses": losses,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        **extra,
    }
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
