#!/usr/bin/env python3
"""Side-by-side figures of stalloc text traces (docs/workloads.md, "Real captures against the
generator"): lower bound, persistent bytes, requests per layer, saved activations and their
lifetimes, size histogram. Reads only the text form; prints Markdown.

usage: compare_traces.py NAME=TRACE [NAME=TRACE ...] [--iteration K]
"""

import argparse
import collections
import statistics

MiB = 1 << 20


def load(path):
    events = []
    with open(path) as f:
        for line in f:
            t = line.split()
            if t and t[0] in ("a", "f"):
                events.append({"kind": t[0], "id": int(t[1]), "size": int(t[2]), "iter": int(t[4]),
                               "phase": t[5], "mb": int(t[6]), "layer": int(t[7]), "thread": int(t[8])})
    return events


def figures(events, iteration):
    peak, cur = 0, 0
    start = {}
    freed_at = {}
    for i, e in enumerate(events):
        if e["kind"] == "a":
            start[e["id"]] = i
            cur += e["size"]
            peak = max(peak, cur)
        else:
            freed_at[e["id"]] = (i, events[i])
            cur -= e["size"]
    allocs = [e for e in events if e["kind"] == "a"]
    persistent = sum(e["size"] for e in allocs if e["id"] not in freed_at)
    steady = [e for e in allocs if e["iter"] == iteration]
    layers = sorted({e["layer"] for e in steady if e["layer"] >= 0})
    mb0 = [e for e in steady if e["mb"] == 0]
    per_layer = collections.Counter((e["phase"], e["layer"]) for e in mb0)
    # A forward allocation of a block that survives into the backward is a saved activation.
    saved = [e for e in mb0 if e["phase"] == "fwd" and e["layer"] >= 0 and e["id"] in freed_at
             and freed_at[e["id"]][1]["phase"] == "bwd"]
    temps = [e for e in mb0 if e["phase"] == "fwd" and e["layer"] >= 0 and e["id"] in freed_at
             and freed_at[e["id"]][1]["phase"] == "fwd"]
    n_layers = max(1, len(layers))
    lifetimes = [freed_at[e["id"]][0] - start[e["id"]] for e in saved]
    iter_requests = sum(1 for e in events if e["iter"] == iteration)
    hist = collections.Counter()
    for e in steady:
        hist[max(0, e["size"] - 1).bit_length()] += 1
    return {
        "lower bound (MiB)": f"{peak / MiB:.2f}",
        "persistent (MiB)": f"{persistent / MiB:.2f}",
        f"requests in iteration {iteration}": iter_requests,
        f"allocations in iteration {iteration}": len(steady),
        "optimizer-step allocations": sum(1 for e in steady if e["phase"] == "opt"),
        "threads issuing requests": len({e["thread"] for e in events}),
        "fwd allocations per layer (mb 0)": f"{sum(per_layer[('fwd', l)] for l in layers) / n_layers:.1f}",
        "bwd allocations per layer (mb 0)": f"{sum(per_layer[('bwd', l)] for l in layers) / n_layers:.1f}",
        "saved activations per layer": f"{len(saved) / n_layers:.1f}",
        "saved bytes per layer (KiB)": f"{sum(e['size'] for e in saved) / n_layers / 1024:.0f}",
        "forward temporaries per layer": f"{len(temps) / n_layers:.1f}",
        "saved lifetime, median requests": f"{statistics.median(lifetimes):.0f}" if lifetimes else "-",
        "saved lifetime, max requests": max(lifetimes) if lifetimes else "-",
    }, hist


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", help="NAME=TRACE")
    p.add_argument("--iteration", type=int, default=1)
    args = p.parse_args()
    names, cols, hists = [], [], []
    for spec in args.traces:
        name, _, path = spec.partition("=")
        fig, hist = figures(load(path), args.iteration)
        names.append(name)
        cols.append(fig)
        hists.append(hist)
    print("| figure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for key in cols[0]:
        print(f"| {key} | " + " | ".join(str(c[key]) for c in cols) + " |")
    print()
    print(f"Allocations of iteration {args.iteration} by size (bucket: up to 2^k bytes):")
    print()
    buckets = sorted(set().union(*hists))
    print("| size <= | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for b in buckets:
        label = f"{(1 << b) // 1024} KiB" if b >= 10 else f"{1 << b} B"
        print(f"| {label} | " + " | ".join(str(h.get(b, 0)) for h in hists) + " |")


if __name__ == "__main__":
    main()
