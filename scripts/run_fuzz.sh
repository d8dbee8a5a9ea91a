#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cpp) with clang + ASan/UBSan and runs each for
# SECONDS (default 30) on its seed corpus (tests/fuzz/corpus/NAME, read only) and a working corpus
# kept in BUILD/corpus/NAME between runs. A crash, sanitizer report, leak, timeout (> 10 s for one
# input) or memory blow-up (> 2 GiB) is a finding: the input is saved under BUILD/findings/NAME/,
# every other target still runs, and the script exits 1. A summary line per target gives the
# executions and the seconds they took.
# Usage: scripts/run_fuzz.sh [SECONDS [TARGET...]]   (BUILD: $STALLOC_FUZZ_BUILD or build-fuzz)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-30}
shift || true
build=${STALLOC_FUZZ_BUILD:-$root/build-fuzz}
STALLOC_WITH_CLANG=1 "$root/scripts/install_deps.sh"

targets=("$@")
if ((${#targets[@]} == 0)); then
  for src in "$root"/tests/fuzz/*_fuzz.cpp; do
    name=${src##*/}
    targets+=("${name%_fuzz.cpp}")
  done
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTALLOC_SANITIZE=address -DSTALLOC_FUZZ=ON -DSTALLOC_BUILD_BENCH=OFF -DSTALLOC_BUILD_TESTS=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
summary=()
for name in "${targets[@]}"; do
  work="$build/corpus/$name"
  findings="$build/findings/$name"
  mkdir -p "$work" "$findings"
  seeds="$root/tests/fuzz/corpus/$name"
  log="$build/findings/$name.log"
  echo "== fuzz $name for ${seconds}s"
  status=0
  "$build/bin/fuzz_$name" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/" "$work" $([[ -d $seeds ]] && echo "$seeds") \
    >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  took=$(sed -n 's/^stat::.*//;s/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -n 1)
  summary+=("$(printf '%-22s %12s executions %5s s  %s' "$name" "${execs:-?}" "${took:-$seconds}" \
    "$([[ $status == 0 ]] && echo ok || echo "FINDING (exit $status, see $log)")")")
  if [[ $status != 0 ]]; then
    failed+=("$name")
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -n 8 || true
  fi
done
echo "== fuzz summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz findings in: ${failed[*]}" >&2
  exit 1
fi
