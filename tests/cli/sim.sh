#!/usr/bin/env bash
# `stalloc sim`: the table, JSON, trace files, the sweep, the HTML report, and clear errors.
# Usage: sim.sh STALLOC_BIN SRC_DIR
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Two identical iterations: two 5 MiB tensors live together. PyTorch packs them into one 20 MiB
# segment: peak allocated 10 MiB, peak reserved 20 MiB, utilization 50%.
source "$(dirname "$0")/two_tensor_trace.bash"
write_two_tensor_trace "$tmp/two.trace"

"$bin" sim "$tmp/two.trace" --allocators pytorch > "$tmp/table.txt" 2> "$tmp/err.txt"
grep -Eq "^two +pytorch +10\.00 MiB +20\.00 MiB +50\.0%" "$tmp/table.txt" || fail "table: $(cat "$tmp/table.txt")"

"$bin" sim "$tmp/two.trace" --json --repeat 0 > "$tmp/all.json" 2> /dev/null
python3 - "$tmp/all.json" <<'PY'
import json, subprocess, sys
d = json.load(open(sys.argv[1]))
assert d["sweep"] is None, d
names = [r["allocator"] for r in d["results"]]
assert names[:3] == ["pytorch", "pytorch-expandable", "gmlake"], names
for r in d["results"]:
    assert r["workload"] == "two", r
    assert r["peak_allocated_bytes"] == 10 << 20, r
    assert r["peak_reserved_bytes"] >= r["peak_allocated_bytes"], r
    assert r["waste_bytes"] == r["peak_reserved_bytes"] - r["peak_allocated_bytes"], r
    assert r["oom"] is False, r
    for key in ("utilization", "driver_calls_per_iteration", "milliseconds"):
        assert key in r, (key, r)
pt = d["results"][0]
assert pt["peak_reserved_bytes"] == 20 << 20 and abs(pt["utilization"] - 0.5) < 1e-9, pt
assert pt["driver_calls_per_iteration"] == 0, pt  # the cached segment serves iteration 1
# Calls by kind, iteration by iteration: the last is driver_calls; PyTorch's first makes its
# one 20 MiB segment (one cudaMalloc), the second nothing.
for r in d["results"]:
    by_it = r["driver_calls_per_iteration_by_kind"]
    assert len(by_it) == r["iterations"] == 2, r
    assert by_it[-1] == r["driver_calls"], r
assert pt["driver_calls_per_iteration_by_kind"] == [{"cuda_malloc": 1}, {}], pt
PY

# By default the last iteration is repeated until the run is steady (2 recorded + 6 copies: 8 in
# all), and
# a run of --run-iterations is priced: PyTorch's one cudaMalloc, then steady iterations that make
# no call, so the run costs what iteration 0 cost. The trace has no time stamps: no share.
"$bin" sim "$tmp/two.trace" --json --allocators pytorch,stalloc --run-iterations 50 > "$tmp/run.json" 2> /dev/null
python3 - "$tmp/run.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    assert r["iterations"] == 8 and r["repeated_iterations"] == 6, r
    assert r["run_iterations"] == 50, r
    per = r["est_allocator_seconds_per_iteration"]
    assert abs(r["est_allocator_seconds_run"] - (sum(per) + 42 * per[-1])) < 1e-12, r
    assert r["est_overhead_run"] == 0, r
    assert r["peak_allocated_bytes"] == 10 << 20, r
pt = d["results"][0]
assert pt["driver_calls_per_iteration_by_kind"] == [{"cuda_malloc": 1}] + [{}] * 7, pt
assert pt["est_allocator_seconds_run"] == pt["est_allocator_seconds_per_iteration"][0] > 0, pt
PY
"$bin" sim "$tmp/two.trace" --allocators pytorch > "$tmp/runtable.txt" 2> /dev/null
grep -q "est. run" "$tmp/runtable.txt" || fail "table has no run column: $(cat "$tmp/runtable.txt")"

# Under a capacity of 12 MiB even the first 5 MiB tensor fails: PyTorch asks for a 20 MiB segment.
"$bin" sim "$tmp/two.trace" --allocators pytorch --capacity 12MiB --json > "$tmp/oom.json" 2> /dev/null
python3 - "$tmp/oom.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
assert r["oom"] is True and r["oom_event"] == 0, r
PY

# A preset, a sweep of the micro-batch under a capacity, and the report.
"$bin" sim --preset tiny --allocators pytorch,pytorch-expandable --capacity 256MiB --sweep mbs --json \
  --report "$tmp/report" > "$tmp/sweep.json" 2> "$tmp/err.txt"
python3 - "$tmp/sweep.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert [r["workload"] for r in d["results"]] == ["tiny", "tiny"], d
assert len(d["sweep"]) == 2, d
for s in d["sweep"]:
    assert s["parameter"] == "mbs" and s["largest"] >= 1 and s["runs"] >= 2, s
    assert 0 < s["peak_reserved_bytes"] <= 256 << 20, s
PY
grep -q "sim: report written to $tmp/report/index.html" "$tmp/err.txt" || fail "report path: $(cat "$tmp/err.txt")"
html="$tmp/report/index.html"
grep -q "<svg" "$html" || fail "report has no plot"
grep -q "pytorch-expandable" "$html" || fail "report lacks an allocator"
grep -q "largest configuration without OOM\|Sweep" "$html" || fail "report lacks the sweep"
if grep -Eq "(src|href)=|https?://|<script" "$html"; then fail "report loads something from outside"; fi

# Errors: exit status 2 and a message that says what was wrong.
expect_error() {
  local what=$1 status; shift
  set +e
  "$bin" sim "$@" > /dev/null 2> "$tmp/err.txt"
  status=$?
  set -e
  [ "$status" -ne 0 ] || fail "no error for: $*"
  grep -q -- "$what" "$tmp/err.txt" || fail "expected '$what' for: $* (got: $(cat "$tmp/err.txt"))"
}
expect_error "unknown model 'tcmalloc'" "$tmp/two.trace" --allocators pytorch,tcmalloc
expect_error "--sweep needs --capacity" --preset tiny --sweep mbs
expect_error "presets only" "$tmp/two.trace" --sweep seq --capacity 1GiB
expect_error "unknown preset" --preset no-such-preset
expect_error "missing.trace" "$tmp/missing.trace"
expect_error "unknown option 'max_split'" "$tmp/two.trace" --pytorch-conf max_split:100
expect_error "expected default or real" --suite everything
expect_error "expected a byte count" "$tmp/two.trace" --capacity lots
expect_error "positive multiple of 512" "$tmp/two.trace" --granularity 1000

# A larger chunk can only round the stalloc model's reservation up.
"$bin" sim "$tmp/two.trace" --allocators stalloc --json > "$tmp/g2.json" 2> /dev/null
"$bin" sim "$tmp/two.trace" --allocators stalloc --granularity 32MiB --json > "$tmp/g32.json" 2> /dev/null
python3 - "$tmp/g2.json" "$tmp/g32.json" <<'PY' || fail "granularity had no effect"
import json, sys
small, large = (json.load(open(p))["results"][0]["peak_reserved_bytes"] for p in sys.argv[1:])
assert large > small and large % (32 << 20) == 0, (small, large)
PY
# --suite real: the three libtorch captures and every device of the 13 snapshots (15 traces),
# each with its time stamps' iteration time where the snapshot has them.
"$bin" sim --suite real --allocators pytorch --json > "$tmp/real.json" 2> /dev/null || fail "--suite real failed"
python3 - "$tmp/real.json" <<'PY' || fail "--suite real did not run the captures and snapshots"
import json, sys
results = json.load(open(sys.argv[1]))["results"]
names = {r["workload"] for r in results}
assert len(names) == 18, sorted(names)
assert {"fixed_seq128", "nca-inference-b", "embedder-train-expandable-3gpu.dev1"} <= names, sorted(names)
models = [r for r in results if not r["recorded"]]
stamped = [r for r in models if r["iteration_time_source"] == "time stamps"]
assert len(stamped) == 14, [r["workload"] for r in models if r not in stamped]
# Beside the models, each snapshot's device shows what its run's allocator actually held: the
# same live bytes at the peak, the recorded segments' peak, named by the allocator it used.
actual = {r["workload"]: r for r in results if r["recorded"]}
assert len(actual) == 15, sorted(actual)
for r in models:
    a = actual.get(r["workload"])
    if a is None:
        continue
    assert a["allocator"] in ("actual", "actual (pytorch)", "actual (pytorch-expandable)"), a  # "actual": no allocator_settings
    assert a["peak_allocated_bytes"] == r["peak_allocated_bytes"] <= a["peak_reserved_bytes"], (a, r)
assert actual["embedder-train-expandable-3gpu.dev0"]["allocator"] == "actual (pytorch-expandable)"
PY
# --gpu-lag: the stalloc rows' events complete late; the same requests, so the same peak
# allocated, and at least as much reserved; the PyTorch rows do not change.
"$bin" sim --preset tiny --allocators stalloc,pytorch --json > "$tmp/nolag.json" 2> /dev/null
"$bin" sim --preset tiny --allocators stalloc,pytorch --gpu-lag 3 --json > "$tmp/lag.json" 2> /dev/null
python3 - "$tmp/nolag.json" "$tmp/lag.json" <<'PY' || fail "--gpu-lag"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["gpu_lag"] == 0 and b["gpu_lag"] == 3, (a["gpu_lag"], b["gpu_lag"])
(sa, pa), (sb, pb) = a["results"], b["results"]
assert sa["allocator"] == sb["allocator"] == "stalloc", (sa, sb)
assert sa["peak_allocated_bytes"] == sb["peak_allocated_bytes"], (sa, sb)
assert sb["peak_reserved_bytes"] >= sa["peak_reserved_bytes"], (sa, sb)
assert pa["peak_reserved_bytes"] == pb["peak_reserved_bytes"], (pa, pb)
PY
expect_error "--gpu-lag: expected a number of queries" --preset tiny --gpu-lag x
expect_error "--run-iterations: expected" "$tmp/two.trace" --run-iterations 0
expect_error "--repeat: expected" "$tmp/two.trace" --repeat many

# At the host's default live mappings limit (vm.max_map_count 65530) every preset still keeps at
# least the utilization of PyTorch's best model: a plan refused for its mappings and one declined
# leave the runtime online, not holding a refused plan's pool beside it (llama7b-tp4pp2vpp2 held
# 26 GiB that way: 60.7%).
"$bin" sim --suite default --allocators stalloc,pytorch,pytorch-expandable \
  --stalloc-conf max_mappings:65530 --json > "$tmp/limit.json" 2> /dev/null || fail "sim under a mappings limit failed"
python3 - "$tmp/limit.json" <<'PY' || fail "utilization under the host's mappings limit"
import json, sys
best, ours = {}, {}
for r in json.load(open(sys.argv[1]))["results"]:
    if r["allocator"] == "stalloc":
        ours[r["workload"]] = r["utilization"]
    else:
        best[r["workload"]] = max(best.get(r["workload"], 0.0), r["utilization"])
assert len(ours) >= 10 and ours.keys() == best.keys(), (ours, best)
low = {w: (u, best[w]) for w, u in ours.items() if u < best[w]}
assert not low, low
PY

# A snapshot given as a TRACE is imported (one workload per device); a command that needs a
# trace file says how to convert one.
src=$2
"$bin" sim "$src/tests/data/snapshots/cnn-optimisation-loop.pickle" \
  "$src/tests/data/snapshots/embedder-train-expandable-3gpu.pickle" --allocators pytorch --json \
  > "$tmp/snap.json" 2> /dev/null || fail "sim of a snapshot failed"
python3 - "$tmp/snap.json" <<'PY' || fail "sim did not import the snapshots"
import json, sys
names = [r["workload"] for r in json.load(open(sys.argv[1]))["results"] if not r["recorded"]]
assert names == ["cnn-optimisation-loop", "embedder-train-expandable-3gpu.dev0",
                 "embedder-train-expandable-3gpu.dev1", "embedder-train-expandable-3gpu.dev2"], names
PY
set +e
"$bin" replay "$src/tests/data/snapshots/cnn-optimisation-loop.pickle" > /dev/null 2> "$tmp/err.txt"
status=$?
set -e
[ "$status" -ne 0 ] || fail "replay took a pickle as a trace"
grep -q "a PyTorch memory snapshot? Convert it with \`stalloc import pytorch" "$tmp/err.txt" ||
  fail "no conversion hint: $(cat "$tmp/err.txt")"
echo "sim.sh: ok"
