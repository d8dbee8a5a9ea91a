#!/usr/bin/env bash
# `stalloc fit`: would a recorded run fit. On the one shared snapshot that recorded an
# out-of-memory (an 80 GB card, device 1): the capacity from the OOM (reserved + free), the
# run's own allocator reproducing it, nothing fitting; on a snapshot without one, --capacity.
# Usage: fit.sh STALLOC_BIN SRC_DIR
set -euo pipefail
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
oom="$src/tests/data/snapshots/embedder-train-expandable-3gpu.pickle"
plain="$src/tests/data/snapshots/lm-small-train-ctx100.pickle"

set +e
"$bin" fit "$oom" > "$tmp/oom.txt" 2> "$tmp/err.txt"
status=$?
set -e
[ "$status" -eq 4 ] || fail "nothing fits: exit $status, expected 4 ($(cat "$tmp/err.txt"))"
grep -q "device 1" "$tmp/oom.txt" || fail "the OOM's device: $(cat "$tmp/oom.txt")"
grep -q "capacity     78.51 GiB (the recorded out-of-memory: 78.42 GiB reserved + 91.25 MiB free" "$tmp/oom.txt" ||
  fail "capacity: $(cat "$tmp/oom.txt")"
grep -q "(pytorch-expandable) ran out of memory asking for 4.94 GiB; its model runs out too" "$tmp/oom.txt" ||
  fail "reproduction: $(cat "$tmp/oom.txt")"
grep -q "verdict      nothing fits" "$tmp/oom.txt" || fail "verdict: $(cat "$tmp/oom.txt")"

set +e
"$bin" fit "$oom" --json > "$tmp/oom.json"
set -e
python3 - "$tmp/oom.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["device"] == 1 and d["oom_recorded"] and d["recorded_allocator"] == "pytorch-expandable", d
assert d["capacity_bytes"] == d["oom_reserved_bytes"] + d["oom_device_free_bytes"], d
assert d["lower_bound_bytes"] > d["capacity_bytes"], d  # live tensors and the request exceed it
for r in d["results"]:
    assert r["fits"] is False and r["oom_event"] is not None, r
    assert r["min_capacity_bytes"] >= d["lower_bound_bytes"], r
assert d["use"] == "", d
PY

# Without a recorded OOM the capacity must be given; at a capacity above every peak all fit.
if "$bin" fit "$plain" > /dev/null 2> "$tmp/err.txt"; then fail "no capacity accepted"; fi
grep -q "give --capacity BYTES" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
"$bin" fit "$plain" --capacity 4GiB --json > "$tmp/plain.json"
python3 - "$tmp/plain.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["oom_recorded"] is False and d["capacity_bytes"] == 4 << 30, d
for r in d["results"]:
    assert r["fits"] and r["headroom_bytes"] == d["capacity_bytes"] - r["peak_reserved_bytes"], r
    assert d["lower_bound_bytes"] <= r["min_capacity_bytes"] <= r["peak_reserved_bytes"] + (2 << 20), r
best = min((r for r in d["results"]), key=lambda r: r["peak_reserved_bytes"])
assert d["use"] == best["allocator"], d
PY
"$bin" fit "$plain" --capacity 4GiB > "$tmp/plain.txt"
grep -q "^verdict      .* fits with" "$tmp/plain.txt" || fail "verdict: $(cat "$tmp/plain.txt")"
if "$bin" fit "$oom" --device 9 > /dev/null 2> "$tmp/err.txt"; then fail "absent device accepted"; fi
grep -q "device 9 has no alloc/free events" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
echo "fit.sh: ok"
