#!/usr/bin/env bash
# `stalloc replay`: the runtime through a trace on the host backend, its JSON, and clear errors.
# Usage: replay.sh STALLOC_BIN SRC_DIR
set -euo pipefail
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bin" gen --preset tiny --iterations 5 -o "$tmp/tiny.trace" 2> /dev/null
"$bin" replay "$tmp/tiny.trace" --backend host --verify --json --conf granularity:2MiB > "$tmp/out.json"
python3 - "$tmp/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for key in ("lower_bound_bytes", "peak_reserved_bytes", "utilization", "matched", "mismatched",
            "vmm_ops_per_iteration", "vmm_ops_median_per_iteration", "verify_errors",
            "ns_per_malloc_median", "ns_per_malloc_median_steady", "per_iteration",
            "plans_declined", "plans_deferred"):
    assert key in d, key
assert d["ns_per_malloc_median"] > 0 and d["ns_per_malloc_median_steady"] > 0, d
assert d["verify_errors"] == 0 and d["failed_allocations"] == 0, d
assert d["plan_installs"] >= 1 and d["matched"] > 0, d
assert 0 < d["utilization"] <= 1 and d["peak_reserved_bytes"] >= d["lower_bound_bytes"], d
# A dense trace: the iterations after the plan's install make no VMM call, and every request of
# the last one is matched.
assert d["vmm_ops_median_per_iteration"] == 0 and d["vmm_ops_per_iteration"] == 0, d
last = d["per_iteration"][-1]
assert last["misses"] == 0 and last["conflicts"] == 0 and last["matched"] > 0, last
# Profiling maps and retires packed pages (events mark when the GPU is done with them, recorded
# when the pages are wanted, at the latest at the plan's install); a single-stream plan followed
# exactly needs none.
profiled = d["per_iteration"][0]["event_calls"] + d["per_iteration"][1]["event_calls"]
assert profiled > 0 and last["event_calls"] == 0, d["per_iteration"]
PY

# 0-byte allocations (torch.empty(0), an MoE expert with no tokens) do not stop planning: four
# allocations per iteration, one of 0 bytes. They used to make the plan be refused ("plan slot 1:
# size 0": plan_installs 0, plan_failures 2).
{
  echo "stalloc-trace 1"
  for it in 0 1 2 3 4; do
    a=$((it * 4 + 1)); z=$((it * 4 + 2)); c=$((it * 4 + 3)); d=$((it * 4 + 4))
    echo "a $a 5242880 0 $it fwd 0 0 0 -"
    echo "a $z 0 0 $it fwd 0 0 0 -"
    echo "a $c 3000000 0 $it fwd 0 0 0 -"
    echo "a $d 1000 0 $it fwd 0 0 0 -"
    echo "f $z 0 0 $it bwd 0 0 0 -"
    echo "f $a 5242880 0 $it bwd 0 0 0 -"
    echo "f $d 1000 0 $it bwd 0 0 0 -"
    echo "f $c 3000000 0 $it bwd 0 0 0 -"
  done
} > "$tmp/zero.trace"
"$bin" replay "$tmp/zero.trace" --backend host --verify --json > "$tmp/zero.json"
python3 - "$tmp/zero.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["plan_installs"] >= 1 and d["plan_failures"] == 0 and d["last_plan_error"] == "", d
assert d["verify_errors"] == 0 and d["failed_allocations"] == 0, d
last = d["per_iteration"][-1]
assert last["matched"] == 4 and last["misses"] == 0 and last["conflicts"] == 0, last
PY

"$bin" replay "$tmp/tiny.trace" --backend host --conf granularity:2MiB > "$tmp/out.txt"
grep -Eq "^vmm ops/iter +0.0 mean, 0.0 median" "$tmp/out.txt" || fail "text: $(cat "$tmp/out.txt")"

# GPU lag on the host backend: events complete after 3 queries; everything still verifies.
"$bin" replay "$tmp/tiny.trace" --backend host --verify --json --gpu-lag 3 --gpu-lag-seed 5 > "$tmp/lag.json"
"$bin" replay "$tmp/tiny.trace" --backend host --verify --json > "$tmp/nolag.json"
python3 - "$tmp/lag.json" "$tmp/nolag.json" <<'PY'
import json, sys
d, nolag = (json.load(open(p)) for p in sys.argv[1:3])
assert d["gpu_lag"] == 3 and d["gpu_lag_seed"] == 5, d
assert d["verify_errors"] == 0 and d["failed_allocations"] == 0 and d["plan_installs"] >= 1, d
# The install takes the idle pages the GPU is done with (or waits for the device) rather than
# make the pool beside those it still runs on: no more memory than without lag.
assert d["peak_reserved_bytes"] <= nolag["peak_reserved_bytes"], (d, nolag)
PY
# Large tensors while the GPU is behind: misses above the high water served in stream order from
# cached ranges it still uses (dedicated_ranges.h), every byte verified; never without lag.
"$bin" gen --preset gpt2-1024-mbs128-r --iterations 3 -o "$tmp/gpt2.trace" 2>/dev/null
"$bin" replay "$tmp/gpt2.trace" --backend host --verify --json --gpu-lag 3 > "$tmp/gpt2-lag.json"
"$bin" replay "$tmp/gpt2.trace" --backend host --verify --json > "$tmp/gpt2.json"
python3 - "$tmp/gpt2-lag.json" "$tmp/gpt2.json" <<'PY'
import json, sys
lag, none = (json.load(open(p)) for p in sys.argv[1:3])
for d in (lag, none):
    assert d["verify_errors"] == 0 and d["failed_allocations"] == 0, d
    assert d["unguarded_uses"] == 0 and d["unmapped_uses"] == 0, d
assert lag["dedicated_behind_gpu"] > 0, lag
assert none["dedicated_behind_gpu"] == 0, none
PY
if "$bin" replay "$tmp/tiny.trace" --gpu-lag-seed 5 > /dev/null 2> "$tmp/err.txt"; then fail "a seed without a lag accepted"; fi
grep -q -- "--gpu-lag-seed needs --gpu-lag" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
if "$bin" replay "$tmp/tiny.trace" --gpu-lag x > /dev/null 2> "$tmp/err.txt"; then fail "--gpu-lag x accepted"; fi
grep -q -- "--gpu-lag: expected" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
if "$bin" replay "$tmp/tiny.trace" --backend cuda --gpu-lag 3 > /dev/null 2> "$tmp/err.txt"; then
  fail "--gpu-lag accepted on the cuda backend"
fi
grep -q -- "--gpu-lag emulates GPU lag on the host backend" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"

# --no-step: no step() at all, the runtime finds the iterations itself and plans them; the
# last iterations of a dense trace follow the plan as with steps.
"$bin" gen --preset tiny --iterations 8 -o "$tmp/tiny8.trace" 2> /dev/null
"$bin" replay "$tmp/tiny8.trace" --no-step --verify --json > "$tmp/nostep.json"
python3 - "$tmp/nostep.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["verify_errors"] == 0 and d["failed_allocations"] == 0 and d["plan_installs"] >= 1, d
last = d["per_iteration"][-1]
assert last["matched"] > 0 and last["misses"] == 0 and last["vmm_ops"] == 0, d["per_iteration"]
PY
if "$bin" replay "$tmp/tiny.trace" --no-step --conf auto_step:false > /dev/null 2> "$tmp/err.txt"; then
  fail "--no-step with auto_step:false accepted"
fi
grep -q "nothing would ever end an iteration" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"

if "$bin" replay "$tmp/missing.trace" > /dev/null 2> "$tmp/err.txt"; then fail "missing trace accepted"; fi
grep -q "missing.trace" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
if "$bin" replay "$tmp/tiny.trace" --conf no_such_key:1 > /dev/null 2> "$tmp/err.txt"; then
  fail "unknown configuration key accepted"
fi
grep -q "no_such_key" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
if "$bin" replay "$tmp/tiny.trace" --backend tpu > /dev/null 2> "$tmp/err.txt"; then fail "unknown backend accepted"; fi
grep -q "tpu" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
# Allocations that fail (a capacity below the trace's peak): exit 3, the failures counted, and a
# utilization of what was live against what was held, never above 100%.
"$bin" gen --preset tiny -o "$tmp/tiny-cap.trace" 2> /dev/null
set +e
"$bin" replay "$tmp/tiny-cap.trace" --conf capacity:4MiB --json > "$tmp/cap.json" 2> "$tmp/err.txt"
status=$?
set -e
[ "$status" -eq 3 ] || fail "failed allocations exit $status, expected 3"
grep -q "allocations failed" "$tmp/err.txt" || fail "no failure message: $(cat "$tmp/err.txt")"
python3 - "$tmp/cap.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["failed_allocations"] > 0 and d["verify_errors"] == 0, d
assert 0 < d["utilization"] <= 1, d
PY

# A trace whose free gives another size than its allocation's, or another stream, is refused
# before anything is allocated (the verify check would read past a block or fail falsely).
source "$(dirname "$0")/two_tensor_trace.bash"
write_two_tensor_trace "$tmp/two.trace"
sed '4s/^f 1 5242880/f 1 9999999/' "$tmp/two.trace" > "$tmp/lying.trace"
grep -q "^f 1 9999999" "$tmp/lying.trace" || fail "the lying trace was not made"
if "$bin" replay "$tmp/lying.trace" --verify > /dev/null 2> "$tmp/err.txt"; then fail "a lying free size accepted"; fi
grep -q "gives 9999999 bytes, its allocation" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
sed 's/^f 2 5242880 0 0/f 2 5242880 1 0/' "$tmp/two.trace" > "$tmp/stream.trace"
if "$bin" replay "$tmp/stream.trace" > /dev/null 2> "$tmp/err.txt"; then fail "a free on another stream accepted"; fi
grep -q "on stream 1, allocated on stream 0" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
# The text summary says why a plan was not installed, and which iterations "steady" means.
"$bin" import pytorch "$src/tests/data/snapshots/lm-small-train-ctx100.pickle" -o "$tmp/small.trace" > /dev/null
"$bin" replay "$tmp/small.trace" > "$tmp/small.txt"
grep -q "^plans declined   1, deferred 0: the last with the .* held beside it" "$tmp/small.txt" ||
  fail "declined reason: $(cat "$tmp/small.txt")"
grep -q "every iteration: no plan installed, all served online" "$tmp/small.txt" || fail "steady: $(cat "$tmp/small.txt")"
"$bin" replay "$tmp/tiny8.trace" > "$tmp/tiny8.txt"
grep -Eq "steady state: [0-9]+ iterations from iteration [0-9]+, after the first to follow" "$tmp/tiny8.txt" ||
  fail "steady: $(cat "$tmp/tiny8.txt")"
echo "replay.sh: ok"
