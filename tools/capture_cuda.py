#!/usr/bin/env python3
"""Record a real CUDA allocation trace of GPT-like training and turn it into a stalloc trace.

For a machine with a GPU and PyTorch (>= 2.0). It trains a small decoder-only transformer built
from torch.nn (random weights, random tokens: nothing is downloaded) for a few iterations, with
activation checkpointing (torch.utils.checkpoint) and a sequence length that changes from
iteration to iteration, while PyTorch's caching allocator records its history
(torch.cuda.memory._record_memory_history). It then dumps the snapshot, runs
`stalloc import pytorch SNAPSHOT -o OUT` and labels every event with its iteration, phase
(fwd/bwd/opt) and micro-batch.

A snapshot knows nothing of iterations, so the script notes, at every phase boundary, how many
allocations and frees the caching allocator has counted so far (torch.cuda.memory_stats). The
importer emits exactly one event per allocation and per free, in the same order, so these counts
are event indices into the imported trace. This holds because nothing here calls record_stream
(a deferred free would be counted before its trace entry) and because recording starts before
the first CUDA allocation of the process.

Example:
  python3 tools/capture_cuda.py --stalloc build/bin/stalloc --out gpt-varlen.trace \\
      --seq-lens 512,1024,256,768 --iterations 4
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stalloc", required=True, help="path to the stalloc binary")
    p.add_argument("--out", required=True, help="stalloc trace to write (text form, *.trace)")
    p.add_argument("--snapshot", help="also keep the raw snapshot pickle here")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq-lens", default="512,1024,256,768",
                   help="sequence length per iteration, cycling through the list")
    p.add_argument("--batch", type=int, default=8, help="sequences per micro-batch")
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--no-checkpoint", action="store_true",
                   help="keep all activations instead of recomputing each block")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                   help="compute dtype under autocast (weights and optimizer stay float32)")
    p.add_argument("--max-entries", type=int, default=2_000_000,
                   help="size of the allocator's history ring buffer")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    args.seq_lens = [int(s) for s in args.seq_lens.split(",")]
    if args.hidden % args.heads:
        p.error("--hidden must be a multiple of --heads")
    if not os.access(args.stalloc, os.X_OK):
        p.error(f"--stalloc {args.stalloc}: not an executable")
    return args


def start_recording(torch, max_entries):
    """Turns on the caching allocator's history; the keyword names changed in PyTorch 2.1."""
    record = torch.cuda.memory._record_memory_history
    try:
        record(enabled="all", context=None, stacks="python", max_entries=max_entries)
    except TypeError:
        record(enabled=True, trace_alloc_max_entries=max_entries, trace_alloc_record_context=False)


def build_model(torch, args):
    nn = torch.nn
    checkpoint = torch.utils.checkpoint.checkpoint

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(args.hidden, 3 * args.hidden)
            self.proj = nn.Linear(args.hidden, args.hidden)

        def forward(self, x, mask):
            b, s, h = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, args.heads, h // args.heads).permute(2, 0, 3, 1, 4)
            scores = (q @ k.transpose(-2, -1)) * (h // args.heads) ** -0.5
            probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
            return self.proj((probs @ v).transpose(1, 2).reshape(b, s, h))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_attn = nn.LayerNorm(args.hidden)
            self.attn = CausalSelfAttention()
            self.ln_mlp = nn.LayerNorm(args.hidden)
            self.mlp = nn.Sequential(nn.Linear(args.hidden, 4 * args.hidden), nn.GELU(),
                                     nn.Linear(4 * args.hidden, args.hidden))

        def forward(self, x, mask):
            x = x + self.attn(self.ln_attn(x), mask)
            return x + self.mlp(self.ln_mlp(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.token_embedding = nn.Embedding(args.vocab, args.hidden)
            self.position_embedding = nn.Embedding(max(args.seq_lens), args.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln_final = nn.LayerNorm(args.hidden)
            self.head = nn.Linear(args.hidden, args.vocab)

        def forward(self, tokens):
            s = tokens.shape[1]
            positions = torch.arange(s, device=tokens.device)
            x = self.token_embedding(tokens) + self.position_embedding(positions)
            mask = torch.ones(s, s, dtype=torch.bool, device=tokens.device).triu(1)
            for block in self.blocks:
                if args.no_checkpoint:
                    x = block(x, mask)
                else:
                    x = checkpoint(block, x, mask, use_reentrant=False)
            return self.head(self.ln_final(x))

    return Gpt()


def train(torch, args, mark):
    """Runs the training loop, calling mark(iteration, phase, micro_batch) before each phase."""
    device = torch.device("cuda")
    mark(0, "other", -1)  # the weights and, at the first step, the optimizer state
    model = build_model(torch, args).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    dtype = getattr(torch, args.dtype)
    for it in range(args.iterations):
        seq = args.seq_lens[it % len(args.seq_lens)]
        for mb in range(args.micro_batches):
            mark(it, "fwd", mb)
            tokens = torch.randint(args.vocab, (args.batch, seq + 1), device=device)
            with torch.autocast(device_type="cuda", dtype=dtype, enabled=dtype != torch.float32):
                logits = model(tokens[:, :-1])
                loss = torch.nn.functional.cross_entropy(
                    logits.float().reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
            mark(it, "bwd", mb)
            (loss / args.micro_batches).backward()
            del logits, loss, tokens
        mark(it, "opt", -1)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        print(f"iteration {it}: seq {seq}, peak allocated "
              f"{torch.cuda.max_memory_allocated() / 2**20:.1f} MiB, reserved "
              f"{torch.cuda.max_memory_reserved() / 2**20:.1f} MiB", file=sys.stderr)


def label_events(trace_path, marks):
    """Rewrites ITER, PHASE and MB of every event line: event i gets the last mark at or before i."""
    with open(trace_path) as f:
        lines = f.readlines()
    out, event, m = [], 0, -1
    for line in lines:
        fields = line.split()
        if fields and fields[0] in ("a", "f"):
            while m + 1 < len(marks) and marks[m + 1][0] <= event:
                m += 1
            if m >= 0:
                _, iteration, phase, micro_batch = marks[m]
                fields[4], fields[5], fields[6] = str(iteration), phase, str(micro_batch)
            line = " ".join(fields) + "\n"
            event += 1
        out.append(line)
    with open(trace_path, "w") as f:
        f.writelines(out)
    return event


def main(argv):
    args = parse_args(argv)
    try:
        import torch
        import torch.utils.checkpoint
    except ImportError:
        sys.exit("capture_cuda.py: PyTorch is not installed for this python")
    if not torch.cuda.is_available():
        sys.exit("capture_cuda.py: no CUDA device visible to PyTorch")
    torch.manual_seed(args.seed)

    start_recording(torch, args.max_entries)

    def requests_so_far():
        stats = torch.cuda.memory_stats()
        return stats.get("allocation.all.allocated", 0) + stats.get("allocation.all.freed", 0)

    base = requests_so_far()
    marks = []

    def mark(iteration, phase, micro_batch):
        marks.append((requests_so_far() - base, iteration, phase, micro_batch))

    train(torch, args, mark)
    total = requests_so_far() - base

    workdir = tempfile.mkdtemp(prefix="stalloc-capture-")
    try:
        snapshot = os.path.join(workdir, "snapshot.pickle")
        torch.cuda.memory._dump_snapshot(snapshot)
        if args.snapshot:
            shutil.copyfile(snapshot, args.snapshot)
        subprocess.run([args.stalloc, "import", "pytorch", snapshot, "-o", args.out,
                        "--device", str(torch.cuda.current_device())], check=True)
    finally:
        shutil.rmtree(workdir)

    events = label_events(args.out, marks)
    if events != total:
        print(f"capture_cuda.py: warning: the trace has {events} events but the allocator counted "
              f"{total} requests (history ring buffer too small? raise --max-entries); iteration "
              "labels are unreliable", file=sys.stderr)
    subprocess.run([args.stalloc, "inspect", args.out], check=False)


if __name__ == "__main__":
    main(sys.argv[1:])
