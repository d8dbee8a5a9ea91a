#!/usr/bin/env bash
# `stalloc stress`: the smallest capacity per allocator, as a table and JSON, and clear errors.
# Usage: stress.sh STALLOC_BIN SRC_DIR
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Two 5 MiB tensors live together in each of two iterations: lower bound 10 MiB. PyTorch
# needs one 20 MiB segment; the chunk planner less.
source "$(dirname "$0")/two_tensor_trace.bash"
write_two_tensor_trace "$tmp/two.trace"

"$bin" stress "$tmp/two.trace" --allocators pytorch,stalloc,stalloc-runtime --json > "$tmp/out.json" 2> /dev/null
python3 - "$tmp/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["lower_bound_bytes"] == 10 * 2**20, d
r = {x["allocator"]: x for x in d["results"]}
assert r["pytorch"]["min_capacity_bytes"] == 20 * 2**20, r["pytorch"]
assert r["stalloc"]["min_capacity_bytes"] < 20 * 2**20, r["stalloc"]
s = r["stalloc"]
assert abs(s["ratio_to_lower_bound"] - s["min_capacity_bytes"] / d["lower_bound_bytes"]) < 1e-9, s
for x in d["results"]:
    assert x["found"] and x["replays"] >= 2, x
    assert x["min_capacity_bytes"] % (2 * 2**20) == 0, x
    assert x["min_capacity_bytes"] >= d["lower_bound_bytes"], x
PY

"$bin" stress --preset tiny --allocators stalloc > "$tmp/table.txt" 2> /dev/null
grep -Eq "^stalloc +[0-9.]+ MiB" "$tmp/table.txt" || fail "table: $(cat "$tmp/table.txt")"

if "$bin" stress "$tmp/two.trace" --allocators nope > /dev/null 2> "$tmp/err.txt"; then fail "unknown allocator accepted"; fi
grep -q "unknown allocator 'nope'" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
if "$bin" stress > /dev/null 2> "$tmp/err.txt"; then fail "no workload accepted"; fi
grep -q "exactly one workload" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
echo "stress.sh: ok"
