#!/usr/bin/env bash
# `stalloc plan TRACE... -o PLAN`: plans, JSON figures, one plan per rank, clear errors.
# Usage: plan_trace.sh STALLOC_BIN SRC_DIR
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Two identical iterations: 3 MiB and 1 MiB live together, then a 2 MiB tensor.
write_trace() {
  {
    echo "stalloc-trace 1"
    local id=1
    for it in 0 1; do
      echo "a $id 3145728 0 $it fwd 0 0 0 -"
      echo "a $((id + 1)) 1048576 0 $it fwd 0 0 0 -"
      echo "f $id 3145728 0 $it fwd 0 0 0 -"
      echo "a $((id + 2)) 2097152 0 $it bwd 0 0 0 -"
      echo "f $((id + 1)) 1048576 0 $it bwd 0 0 0 -"
      echo "f $((id + 2)) 2097152 0 $it bwd 0 0 0 -"
      id=$((id + 3))
    done
  } > "$1"
}
write_trace "$tmp/r0.trace"
write_trace "$tmp/r1.trace"

"$bin" plan "$tmp/r0.trace" -o "$tmp/one.plan" > "$tmp/out.txt"
grep -q "alias plan of iteration 1, 2 chunks" "$tmp/out.txt" || fail "summary: $(cat "$tmp/out.txt")"
head -1 "$tmp/one.plan" | grep -qx "stalloc-plan 1" || fail "plan header"
grep -q "^num_chunks 2$" "$tmp/one.plan" || fail "num_chunks: $(cat "$tmp/one.plan")"

"$bin" plan "$tmp/r0.trace" -o "$tmp/one.plan" --json > "$tmp/out.json"
python3 - "$tmp/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["lower_bound_bytes"] == 4 << 20, d
assert d["peak_reserved_bytes"] == 4 << 20, d
assert abs(d["utilization"] - 1.0) < 1e-9, d
assert d["mappings"] == 4 and d["vmm_ops_per_iteration"] == 0, d
assert d["milliseconds"] >= 0, d
PY

"$bin" plan "$tmp/r0.trace" "$tmp/r1.trace" -o "$tmp/multi.plan" --mode windowed --windows 2 \
  --iteration 0 --granularity 1MiB --json > "$tmp/multi.json"
[[ -f "$tmp/multi.plan.rank0" && -f "$tmp/multi.plan.rank1" ]] || fail "per-rank plans missing"
grep -q "^granularity 1048576$" "$tmp/multi.plan.rank1" || fail "granularity not applied"
python3 - "$tmp/multi.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert isinstance(d, list) and len(d) == 2, d
assert all(p["mode"] == "windowed" and p["iteration"] == 0 for p in d), d
assert [p["plan"].rsplit(".", 1)[1] for p in d] == ["rank0", "rank1"], d
PY

"$bin" plan "$tmp/r0.trace" -o "$tmp/o.plan" --mode offset > /dev/null
grep -q "^mode offset$" "$tmp/o.plan" || fail "offset mode"

expect_error() {
  local needle=$1; shift
  if "$bin" plan "$@" > "$tmp/err.out" 2> "$tmp/err.txt"; then fail "no error for: $*"; fi
  grep -q -- "$needle" "$tmp/err.txt" || fail "expected '$needle' for '$*', got: $(cat "$tmp/err.txt")"
}
expect_error "missing -o PLAN" "$tmp/r0.trace"
expect_error "--mode must be alias, windowed or offset" "$tmp/r0.trace" -o "$tmp/x.plan" --mode paper
expect_error "no iteration 7" "$tmp/r0.trace" -o "$tmp/x.plan" --iteration 7
expect_error "--windows needs a positive count" "$tmp/r0.trace" -o "$tmp/x.plan" --windows 0
printf 'stalloc-trace 1\na 1 10 0 0 fwd 0 0 0 -\nbogus\n' > "$tmp/bad.trace"
expect_error "bad.trace:3" "$tmp/bad.trace" -o "$tmp/x.plan"
# Every option of the trace form is in `plan --help`.
"$bin" plan --help > "$tmp/help.txt"
for option in --output --mode --iteration --granularity --windows --time-limit --remainder --json; do
  grep -q -- "^  $option\|^  -o, $option" "$tmp/help.txt" || fail "plan --help lacks $option"
done
echo "plan_trace: ok"
