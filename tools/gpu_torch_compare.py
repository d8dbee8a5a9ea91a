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

After training, under every allocator, the checks a user's program leans on (JSON "checks",
each true or false, "check_notes" with what was seen): an empty tensor, torch.cuda.memory_stats()
and memory_allocated() (stalloc answers them once enabled), a caught out-of-memory error
(torch.cuda.OutOfMemoryError; under stalloc without libstalloc_torch_oom.so a RuntimeError that
starts the same way) after which training goes on, and, under stalloc, a CUDA graph capture
refused with the reason.
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


def run_checks(torch, model, args, stalloc):
    """What user code does beside training; returns ({name: passed}, {name: what was seen})."""
    checks, notes = {}, {}

    def check(name, fn):
        try:
            ok, note = fn()
        except Exception as exc:  # a check that raises fails, with the reason
            ok, note = False, f"{type(exc).__name__}: {exc}"[:400]
        checks[name], notes[name] = bool(ok), note

    def empty_tensor():
        empty = torch.empty(0, device="cuda")
        nothing = torch.ones(100, device="cuda").nonzero()[:0]
        total = (empty.sum() + nothing.sum()).item()
        return total == 0 and empty.numel() == 0, f"data_ptr {empty.data_ptr()}"

    def memory_stats():
        stats = torch.cuda.memory_stats()
        allocated = torch.cuda.memory_allocated()
        x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        grown = torch.cuda.memory_allocated() - allocated
        del x
        torch.cuda.reset_peak_memory_stats()
        ok = (stats.get("allocated_bytes.all.current", -1) >= 0 and grown == 64 << 20
              and torch.cuda.max_memory_reserved() >= torch.cuda.memory_reserved() > 0)
        if stalloc is not None:
            ok = ok and stats["reserved_bytes.all.current"] > 0 and "torch.cuda.memory_stats" in stalloc.integration()["patched"]
        return ok, f"{len(stats)} keys, allocated {allocated}, reserved {torch.cuda.memory_reserved()}"

    def out_of_memory():
        total = torch.cuda.get_device_properties(0).total_memory
        expected = torch.cuda.OutOfMemoryError
        if stalloc is not None and stalloc.integration()["out_of_memory_error"] != "torch.cuda.OutOfMemoryError":
            expected = RuntimeError  # no libstalloc_torch_oom.so: checked by the message only
        try:
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        except expected as exc:
            message = str(exc)
            # Training goes on after the error.
            y = model(torch.randint(0, args.vocab, (1, 16), device="cuda")).float().sum().item()
            ok = message.startswith("CUDA out of memory. Tried to allocate") and y == y
            return ok, f"{type(exc).__name__}: {message[:300]}"
        return False, "no error for twice the device's memory"

    def graph_capture_refused():
        if stalloc is None:
            return True, "not stalloc"
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                torch.ones(16, device="cuda").mul_(2)
        except RuntimeError as exc:
            return "CUDA graph capture is not supported" in str(exc), str(exc)[:300]
        return False, "the capture was let through"

    check("empty_tensor", empty_tensor)
    check("memory_stats", memory_stats)
    check("out_of_memory", out_of_memory)
    check("graph_capture_refused", graph_capture_refused)  # last: leaves a half-begun graph
    return checks, notes


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
        extra = {k: s[k] for k in ("matches", "misses", "conflicts", "plan_installs", "plan_failures",
                                   "plans_declined", "plans_deferred", "install_waits",
                                   "dedicated_behind_gpu",
                                   "vmm_calls", "live_mappings", "last_plan_error")}
        extra["stalloc_conf"] = args.stalloc_conf
        extra["integration"] = stalloc.integration()
    else:
        peak_reserved = torch.cuda.max_memory_reserved()
        peak_allocated = torch.cuda.max_memory_allocated()
        extra = {}
    # After the figures: the checks make requests of their own (misses for stalloc's plan).
    extra["checks"], extra["check_notes"] = run_checks(torch, model, args, stalloc if args.allocator == "stalloc" else None)
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
