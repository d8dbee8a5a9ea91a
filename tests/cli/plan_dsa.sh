#!/usr/bin/env bash
# `stalloc plan --dsa`: a small problem solved to its lower bound with a valid CSV written, the
# --json report (time used, stop reason), a capacity that cannot be met (still exit 0), a
# malformed CSV (non-zero exit, message naming the file and line), the best-fit-decreasing
# baseline, --dsa-generate (seeded instances, solved and checked), and --work-limit (the same
# result on every run), a time limit the heuristics cannot meet (the sweeps' placement, reported).
# Usage: plan_dsa.sh STALLOC_BIN SRC_DIR
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat > "$tmp/in.csv" <<'CSV'
id,lower,upper,size
1,0,3,4
2,3,9,4
3,0,9,4
4,9,21,4
5,0,21,4
CSV

"$bin" plan --dsa "$tmp/in.csv" --output "$tmp/out.csv" --capacity 12 --time-limit 2 --seed 3 --json \
  > "$tmp/report.json" || fail "plan --dsa exited $?"
grep -q '"peak_bytes":12' "$tmp/report.json" || fail "peak not 12: $(cat "$tmp/report.json")"
grep -q '"lower_bound_bytes":12' "$tmp/report.json" || fail "lower bound: $(cat "$tmp/report.json")"
grep -q '"within_capacity":true' "$tmp/report.json" || fail "capacity: $(cat "$tmp/report.json")"
grep -q '"buffers":5' "$tmp/report.json" || fail "buffers: $(cat "$tmp/report.json")"
grep -q '"stop":"lower-bound"' "$tmp/report.json" || fail "stop: $(cat "$tmp/report.json")"
grep -q '"stopped_at_lower_bound":true' "$tmp/report.json" || fail "stopped: $(cat "$tmp/report.json")"
grep -q '"time_limit_seconds":2' "$tmp/report.json" || fail "limit: $(cat "$tmp/report.json")"
for key in ratio milliseconds seconds strategy greedy_peak_bytes best_fit_decreasing_peak_bytes validated; do
  grep -q "\"$key\":" "$tmp/report.json" || fail "no $key in $(cat "$tmp/report.json")"
done
head -1 "$tmp/out.csv" | grep -qx 'id,lower,upper,size,offset' || fail "output header"
[ "$(wc -l < "$tmp/out.csv")" -eq 6 ] || fail "output rows"
# Offsets: every buffer inside [0, 12) and live-overlapping buffers disjoint in address.
awk -F, 'NR > 1 { id[NR] = $1; lo[NR] = $2; up[NR] = $3; sz[NR] = $4; off[NR] = $5; n = NR }
  END {
    for (i = 2; i <= n; i++) {
      if (off[i] + sz[i] > 12) { print "buffer " id[i] " above 12"; exit 1 }
      for (j = i + 1; j <= n; j++)
        if (lo[i] < up[j] && lo[j] < up[i] && off[i] < off[j] + sz[j] && off[j] < off[i] + sz[i]) {
          print "buffers " id[i] " and " id[j] " overlap"; exit 1
        }
    }
  }' "$tmp/out.csv" || fail "invalid placement"

# -o alias, a human summary, and no capacity given: no within_capacity.
"$bin" plan --dsa "$tmp/in.csv" -o "$tmp/out2.csv" --time-limit 1 > "$tmp/summary.txt" || fail "-o"
grep -q "lower bound" "$tmp/summary.txt" || fail "summary: $(cat "$tmp/summary.txt")"
grep -q "stopped at the lower bound after" "$tmp/summary.txt" || fail "summary: $(cat "$tmp/summary.txt")"
"$bin" plan --dsa "$tmp/in.csv" -o "$tmp/out3.csv" --time-limit 0 --json > "$tmp/r3.json"
if grep -q within_capacity "$tmp/r3.json"; then fail "within_capacity without --capacity"; fi
grep -Eq '"stop":"(no-search|lower-bound)"' "$tmp/r3.json" || fail "time limit 0: $(cat "$tmp/r3.json")"

# A capacity below the lower bound: still a valid placement and exit 0, reported as not within.
"$bin" plan --dsa "$tmp/in.csv" -o "$tmp/out4.csv" --capacity 8 --time-limit 0.5 --json \
  > "$tmp/r4.json" || fail "over capacity should exit 0"
grep -q '"within_capacity":false' "$tmp/r4.json" || fail "capacity 8: $(cat "$tmp/r4.json")"
[ -s "$tmp/out4.csv" ] || fail "no output over capacity"

# Generated instances: the same seed writes the same file; solved with a short limit, the
# placement is valid, reports its time and stop reason, and is no worse than the baseline.
"$bin" plan --dsa-generate irregular --buffers 1500 --seed 4 -o "$tmp/g1.csv" > "$tmp/g.txt" ||
  fail "--dsa-generate"
grep -q "1500 buffers (irregular, seed 4)" "$tmp/g.txt" || fail "generate: $(cat "$tmp/g.txt")"
"$bin" plan --dsa-generate irregular --buffers 1500 --seed 4 -o "$tmp/g2.csv" > /dev/null
cmp -s "$tmp/g1.csv" "$tmp/g2.csv" || fail "generator not deterministic"
head -1 "$tmp/g1.csv" | grep -qx 'id,lower,upper,size' || fail "generated header"
[ "$(wc -l < "$tmp/g1.csv")" -eq 1501 ] || fail "generated rows"
"$bin" plan --dsa "$tmp/g1.csv" -o "$tmp/g.out" --time-limit 0.5 --json > "$tmp/g.json" ||
  fail "solving the generated instance"
"$bin" plan --dsa "$tmp/g1.csv" -o "$tmp/b.out" --strategy best-fit-decreasing --json \
  > "$tmp/b.json" || fail "--strategy best-fit-decreasing"
grep -q '"strategy":"best-fit-decreasing"' "$tmp/b.json" || fail "baseline: $(cat "$tmp/b.json")"
grep -Eq '"stop":"(no-search|lower-bound)"' "$tmp/b.json" || fail "baseline: $(cat "$tmp/b.json")"
peak() { sed -E 's/.*"peak_bytes":([0-9]+).*/\1/' "$1"; }
[ "$(peak "$tmp/g.json")" -le "$(peak "$tmp/b.json")" ] ||
  fail "worse than best-fit-decreasing: $(cat "$tmp/g.json") vs $(cat "$tmp/b.json")"
grep -Eq '"stop":"(time-limit|lower-bound)"' "$tmp/g.json" || fail "stop: $(cat "$tmp/g.json")"
for out in "$tmp/g.out" "$tmp/b.out"; do
  # Sweep in time (ends before starts at equal times), live ranges sorted by offset: O(n log n).
  awk -F, 'NR > 1 { print $2 ",1," $5 "," $5 + $4; print $3 ",0," $5 "," $5 + $4 }' "$out" |
    sort -t, -k1,1n -k2,2n | awk -F, '
      $2 == 0 { delete live[$3 "," $4]; next }
      { for (k in live) { split(k, r, ","); if (r[1] < $4 && $3 < r[2]) { print "overlap at " $1; exit 1 } }
        live[$3 "," $4] = 1 }' || fail "generated placement invalid ($out)"
done
# A work limit and no time limit: the same placement and report on every run (seed 5 needs the
# search; it stops at the limit), the work in --json; without --work-limit no work fields.
"$bin" plan --dsa-generate irregular --buffers 1500 --seed 5 -o "$tmp/w.csv" > /dev/null
for run in 1 2; do
  "$bin" plan --dsa "$tmp/w.csv" -o "$tmp/w$run.out" --time-limit 0 --work-limit 20000 --json \
    > "$tmp/w$run.json" || fail "--work-limit"
done
cmp -s "$tmp/w1.out" "$tmp/w2.out" || fail "a work limit gave two placements"
grep -q '"work_limit":20000' "$tmp/w1.json" || fail "work_limit: $(cat "$tmp/w1.json")"
grep -q '"work":20000' "$tmp/w1.json" || fail "work: $(cat "$tmp/w1.json")"
grep -q '"stop":"work-limit"' "$tmp/w1.json" || fail "stop: $(cat "$tmp/w1.json")"
strip_time() { sed -E 's/"(milliseconds|seconds)":[0-9.e+-]+//g' "$1"; }
[ "$(strip_time "$tmp/w1.json")" = "$(strip_time "$tmp/w2.json")" ] ||
  fail "two reports: $(cat "$tmp/w1.json") vs $(cat "$tmp/w2.json")"
"$bin" plan --dsa "$tmp/w.csv" -o "$tmp/w3.out" --time-limit 0 --work-limit 20000 > "$tmp/w.txt"
grep -q "used the work limit: 20000 of 20000" "$tmp/w.txt" || fail "summary: $(cat "$tmp/w.txt")"
if grep -q '"work' "$tmp/g.json"; then
  fail "work fields without --work-limit: $(cat "$tmp/g.json")"
fi
if "$bin" plan --dsa "$tmp/w.csv" -o "$tmp/x.csv" --work-limit lots 2> "$tmp/err.txt"; then
  fail "bad work limit accepted"
fi
if "$bin" plan --dsa-generate nonsense --buffers 10 -o "$tmp/x.csv" 2> "$tmp/err.txt"; then
  fail "unknown kind accepted"
fi
if "$bin" plan --dsa "$tmp/in.csv" -o "$tmp/x.csv" --strategy fastest 2> "$tmp/err.txt"; then
  fail "unknown strategy accepted"
fi

# A limit the heuristics cannot meet: those still running give up, the start-time sweeps'
# placement is written, and the report says the limit was not met and how many were cut.
"$bin" plan --dsa-generate irregular --buffers 30000 --seed 6 -o "$tmp/big.csv" > /dev/null
"$bin" plan --dsa "$tmp/big.csv" -o "$tmp/big.out" --time-limit 0.000001 --json > "$tmp/cut.json" ||
  fail "plan --dsa with a tiny limit exited $?"
grep -q '"time_limit_met":false' "$tmp/cut.json" || fail "limit met? $(cat "$tmp/cut.json")"
grep -q '"cut_by_time_limit":[1-9]' "$tmp/cut.json" || fail "nothing cut: $(cat "$tmp/cut.json")"
grep -q '"strategy":"start/' "$tmp/cut.json" || fail "not the sweeps: $(cat "$tmp/cut.json")"
[ "$(wc -l < "$tmp/big.out")" -eq 30001 ] || fail "rows of the cut placement"

# Malformed input: non-zero exit and file:line in the message.
printf 'id,lower,upper,size\n1,0,3,4\n2,5,2,4\n' > "$tmp/bad.csv"
if "$bin" plan --dsa "$tmp/bad.csv" -o "$tmp/bad.out" 2> "$tmp/err.txt"; then fail "bad CSV accepted"; fi
grep -qF "bad.csv:3:" "$tmp/err.txt" || fail "no location: $(cat "$tmp/err.txt")"
printf 'id,lower,upper,size\n1,0,3\n' > "$tmp/short.csv"
if "$bin" plan --dsa "$tmp/short.csv" -o "$tmp/s.out" 2> "$tmp/err.txt"; then fail "short row accepted"; fi
grep -qF "short.csv:2:" "$tmp/err.txt" || fail "no location: $(cat "$tmp/err.txt")"

# Usage errors.
if "$bin" plan --dsa "$tmp/in.csv" 2> "$tmp/err.txt"; then fail "missing --output accepted"; fi
grep -q -- "--output" "$tmp/err.txt" || fail "usage message: $(cat "$tmp/err.txt")"
if "$bin" plan --dsa "$tmp/in.csv" -o "$tmp/x.csv" --capacity lots 2> "$tmp/err.txt"; then
  fail "bad capacity accepted"
fi
echo "plan_dsa: ok"
