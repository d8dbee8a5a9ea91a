#!/usr/bin/env bash
# `stalloc import`, `export` and `inspect` on tiny files: outputs, round trips through every
# form, and a non-zero exit with a located message on malformed input.
# Usage: import_inspect.sh STALLOC_BIN SRC_DIR
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# Runs a command that must fail, and checks that its stderr holds the expected words.
expect_error() {
  local want=$1
  shift
  if "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"; then fail "should have failed: $*"; fi
  grep -qF -- "$want" "$tmp/err.txt" || fail "expected '$want' from: $* ; got: $(cat "$tmp/err.txt")"
}

# STAlloc artifact log: two identical iterations of a forward and a backward tensor.
cat > "$tmp/art.log" <<'LOG'
1 0x1000 4096 0
Iteration Index : 0
micro-batch : F
1 0x2000 1048576 0
micro-batch : B
1 0x3000 3145728 0x7f00
0 0x2000 1048576 0
0 0x3000 3145728 0x7f00
Iteration Index : 1
micro-batch : F
1 0x2000 1048576 0
micro-batch : B
1 0x3000 3145728 0x7f00
0 0x2000 1048576 0
0 0x3000 3145728 0x7f00
Iteration Index : 2
micro-batch : F
1 0x2000 1048576 0
micro-batch : B
1 0x3000 3145728 0x7f00
0 0x2000 1048576 0
0 0x3000 3145728 0x7f00
LOG
"$bin" import stalloc-artifact "$tmp/art.log" -o "$tmp/art.trace" > "$tmp/out.txt"
grep -q "13 events" "$tmp/out.txt" || fail "import summary: $(cat "$tmp/out.txt")"
[ "$(head -n 1 "$tmp/art.trace")" = "stalloc-trace 1" ] || fail "header: $(head -n 1 "$tmp/art.trace")"
grep -qx "meta source stalloc-artifact" "$tmp/art.trace" || fail "meta source missing"
grep -qx "meta input art.log" "$tmp/art.trace" || fail "meta input missing"
grep -qx "a 3 3145728 1 0 bwd 0 -1 0 -" "$tmp/art.trace" || fail "backward event: $(cat "$tmp/art.trace")"

"$bin" inspect "$tmp/art.trace" > "$tmp/inspect.txt"
grep -Eq "^lower bound +4\.00 MiB \(4198400 B\) at event 2, iteration 0" "$tmp/inspect.txt" ||
  fail "inspect: $(cat "$tmp/inspect.txt")"
grep -Eq "^iterations +3 \(periodic: yes, 2 distinct signatures\)" "$tmp/inspect.txt" ||
  fail "periodic: $(cat "$tmp/inspect.txt")"

"$bin" inspect "$tmp/art.trace" --json --small 2MiB > "$tmp/inspect.json"
for want in '"allocations":7' '"lower_bound_bytes":4198400' '"iterations":3' '"periodic":true' \
  '"small_threshold_bytes":2097152' '"problem":null'; do
  grep -qF "$want" "$tmp/inspect.json" || fail "json lacks $want: $(cat "$tmp/inspect.json")"
done
if command -v python3 > /dev/null; then
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/inspect.json" || fail "inspect --json is not JSON"
fi

# text -> binary -> text is the identity.
"$bin" export binary "$tmp/art.trace" -o "$tmp/art.traceb" > /dev/null
"$bin" export text "$tmp/art.traceb" -o "$tmp/again.trace" > /dev/null
cmp -s "$tmp/art.trace" "$tmp/again.trace" || fail "text/binary round trip differs"
[ "$(head -c 4 "$tmp/art.traceb" | od -An -tx1 | tr -d ' ')" = "8953544c" ] || fail "binary magic"

# CSV import then export keeps every interval (touching intervals stay apart).
printf 'id,lower,upper,size\n0,0,10,100\n1,10,20,50\n2,5,15,7\n' > "$tmp/p.csv"
"$bin" import csv "$tmp/p.csv" -o "$tmp/p.trace" --device 3 > /dev/null
grep -qx "device 3" "$tmp/p.trace" || fail "--device not recorded"
"$bin" export csv "$tmp/p.trace" -o "$tmp/back.csv" > /dev/null
[ "$(sed -n 1p "$tmp/back.csv")" = "id,lower,upper,size" ] || fail "csv header: $(cat "$tmp/back.csv")"
grep -qx "0,0,2,100" "$tmp/back.csv" || fail "csv export: $(cat "$tmp/back.csv")"
grep -qx "2,1,4,7" "$tmp/back.csv" || fail "csv export: $(cat "$tmp/back.csv")"
grep -qx "1,3,5,50" "$tmp/back.csv" || fail "csv export: $(cat "$tmp/back.csv")"

# RMM log.
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.000100,allocate,0x10,64,0x0\n1,10:00:00.000300,free,0x10,64,0x0\n' \
  > "$tmp/rmm.csv"
"$bin" import rmm "$tmp/rmm.csv" -o "$tmp/rmm.trace" > /dev/null
grep -qx "f 1 64 0 0 unknown -1 -1 0 - 200000" "$tmp/rmm.trace" || fail "rmm: $(cat "$tmp/rmm.trace")"

# PyTorch snapshot (pickle protocol 4): device 0 allocates and frees 64 B, device 1 has no
# entries, device 2 allocates 128 B. One output per device with events.
printf '\200\004\225\236\000\000\000\000\000\000\000}\224\214\015device_traces\224]\224(]\224(}\224(\214\006action\224\214\005alloc\224\214\004addr\224K\020\214\004size\224K@\214\006stream\224K\000\214\007time_us\224K\005u}\224(h\005\214\016free_completed\224h\007K\020h\010K@h\011K\000h\012K\005ue]\224]\224}\224(h\005h\006h\007K h\010K\200h\011K\000h\012K\005uaes.' \
  > "$tmp/snap.pickle"
"$bin" import pytorch "$tmp/snap.pickle" -o "$tmp/snap.trace" > /dev/null
grep -qx "f 1 64 0 0 unknown -1 -1 0 - 5000" "$tmp/snap.dev0.trace" || fail "pytorch dev0: $(cat "$tmp/snap.dev0.trace")"
grep -qx "device 2" "$tmp/snap.dev2.trace" || fail "pytorch dev2"
[ ! -e "$tmp/snap.dev1.trace" ] || fail "a device without events got a file"
"$bin" import pytorch "$tmp/snap.pickle" -o "$tmp/only2.traceb" --device 2 > /dev/null
"$bin" inspect "$tmp/only2.traceb" --json | grep -qF '"lower_bound_bytes":128' || fail "pytorch --device 2"
expect_error "devices with events: 0, 2" "$bin" import pytorch "$tmp/snap.pickle" -o "$tmp/n.trace" --device 1

# A snapshot with an unknown action, an unknown key and a frame whose line is 2**64-1 (seen in
# real files): imported, and what was skipped is counted on its own line.
printf '\200\004\225\361\000\000\000\000\000\000\000}\224\214\015device_traces\224]\224]\224(}\224(\214\006action\224\214\005alloc\224\214\004addr\224K\020\214\004size\224K@\214\006stream\224K\000\214\007time_us\224K\005\214\006colour\224K\001u}\224h\005\214\007mystery\224s}\224(h\005\214\016free_completed\224h\007K\020h\010K@h\011K\000h\012K\006u}\224(h\005h\006h\007K h\010K\010h\011K\000h\012K\007\214\006frames\224]\224}\224(\214\010filename\224\214\004a.py\224\214\004line\224\212\011\377\377\377\377\377\377\377\377\000\214\004name\224\214\001f\224uaueas.' \
  > "$tmp/odd.pickle"
"$bin" import pytorch "$tmp/odd.pickle" -o "$tmp/odd.trace" > "$tmp/out.txt"
grep -qx "  skipped_unknown_actions: 1 (mystery:1)" "$tmp/out.txt" || fail "unknown actions: $(cat "$tmp/out.txt")"
grep -qx "  skipped_unknown_keys: 1 (colour:1)" "$tmp/out.txt" || fail "unknown keys: $(cat "$tmp/out.txt")"
grep -qx "meta skipped_unknown_actions 1" "$tmp/odd.trace" || fail "meta skipped_unknown_actions"
grep -q "3 events, 2 allocations" "$tmp/out.txt" || fail "odd events: $(cat "$tmp/out.txt")"
# A used field out of range: the file, the entry and what was expected.
printf '\200\004\225J\000\000\000\000\000\000\000}\224\214\015device_traces\224]\224]\224}\224(\214\006action\224\214\005alloc\224\214\004addr\224\212\011\000\000\000\000\000\000\000\000\001\214\004size\224K\010uaas.' \
  > "$tmp/bigaddr.pickle"
expect_error "bigaddr.pickle: device_traces[0][0]: expected a non-negative 'addr' within uint64, got 18446744073709551616" \
  "$bin" import pytorch "$tmp/bigaddr.pickle" -o "$tmp/b.trace"

# Real snapshots (tests/data/snapshots/README.md). cnn-optimisation-loop: 31 blocks live
# before recording, ten steps of which the last nine repeat 193 allocations, the run's peak.
snaps=$2/tests/data/snapshots
"$bin" import pytorch "$snaps/cnn-optimisation-loop.pickle" -o "$tmp/cnn.trace" > "$tmp/out.txt"
for want in "  seeded_live_blocks: 31 (8.37 MiB live at the start: 0 freed unseen, 31 active in the dump-time segments)" \
  "  iterations: 10 (repeating every 193 allocations)" "  iteration_seconds: 0.027256" "  snapshot_events: 9"; do
  grep -qxF -- "$want" "$tmp/out.txt" || fail "cnn import lacks '$want': $(cat "$tmp/out.txt")"
done
"$bin" inspect "$tmp/cnn.trace" > "$tmp/inspect.txt"
grep -Eq "^iterations +10 " "$tmp/inspect.txt" || fail "cnn inspect: $(cat "$tmp/inspect.txt")"
grep -Eq "^lower bound +103\.24 MiB " "$tmp/inspect.txt" || fail "cnn peak: $(cat "$tmp/inspect.txt")"
# lm-2.7b-train-ctx128: 50.8 GiB live before recording; the peak is the run's 65016 MiB.
"$bin" import pytorch "$snaps/lm-2.7b-train-ctx128.pickle" -o "$tmp/lm.traceb" > /dev/null
"$bin" inspect "$tmp/lm.traceb" --json | grep -qF '"lower_bound_bytes":68173760516' || fail "lm-2.7b peak"
# Three devices with expandable segments; device 1 ran out of memory.
"$bin" import pytorch "$snaps/embedder-train-expandable-3gpu.pickle" -o "$tmp/emb.trace" > "$tmp/out.txt"
for d in 0 1 2; do [ -e "$tmp/emb.dev$d.trace" ] || fail "embedder device $d"; done
grep -qxF "  oom_events: 1 (4.94 GiB requested)" "$tmp/out.txt" || fail "oom: $(cat "$tmp/out.txt")"
grep -qxF "  segment_unmap_events: 6" "$tmp/out.txt" || fail "unmap: $(cat "$tmp/out.txt")"
grep -qx "meta segment_map_events 175" "$tmp/emb.dev0.trace" || fail "segment_map_events"

# Malformed input: a non-zero exit and a message naming the file and line.
printf 'stalloc-trace 1\ndevice 0\na 1 100 0 0 fwd -1 -1 0\n' > "$tmp/bad.trace"
expect_error "bad.trace:3: expected FLAGS" "$bin" inspect "$tmp/bad.trace"
printf 'stalloc-trace 1\na 1 1x0 0 0 fwd -1 -1 0 -\n' > "$tmp/bad2.trace"
expect_error "bad2.trace:2: expected SIZE" "$bin" inspect "$tmp/bad2.trace"
printf 'stalloc-trace 1\nf 9 100 0 0 fwd -1 -1 0 -\n' > "$tmp/unknown.trace"
expect_error "free of id 9 which is not live" "$bin" inspect "$tmp/unknown.trace"
printf '1 0x10 8 0\nnonsense\n' > "$tmp/bad.log"
expect_error "bad.log:2: expected '1 PTR SIZE STREAM'" "$bin" import stalloc-artifact "$tmp/bad.log" -o "$tmp/x.trace"
[ ! -e "$tmp/x.trace" ] || fail "a failed import left an output"
# A pickle that names a global (collections.OrderedDict) is refused, nothing is run.
printf '\200\002ccollections\nOrderedDict\nq\000)Rq\001.' > "$tmp/evil.pickle"
expect_error "refusing to load untrusted pickle" "$bin" import pytorch "$tmp/evil.pickle" -o "$tmp/y.trace"
expect_error "unknown import format 'nope'" "$bin" import nope "$tmp/p.csv" -o "$tmp/z.trace"
expect_error "cannot open" "$bin" inspect "$tmp/missing.trace"

# A stalloc trace given to the snapshot importer is named for what it is.
"$bin" gen --preset tiny --iterations 2 -o "$tmp/as-snapshot.trace" 2> /dev/null
if "$bin" import pytorch "$tmp/as-snapshot.trace" -o "$tmp/never.trace" 2> "$tmp/err.txt"; then
  fail "a trace imported as a snapshot"
fi
grep -q "this is a stalloc trace, not a PyTorch memory snapshot" "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
echo "import_inspect: ok"
