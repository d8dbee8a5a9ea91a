#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) and runs each for SECONDS (default 30) on
# its seed corpus. A crash or sanitizer report fails the script. Usage: scripts/run_fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-30}
STALLOC_WITH_CLANG=1 "$root/scripts/install_deps.sh"
CC=clang CXX=clang++ "$root/scripts/build.sh" "$root/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTALLOC_SANITIZE=address -DSTALLOC_FUZZ=ON -DSTALLOC_BUILD_BENCH=OFF -DSTALLOC_BUILD_TESTS=ON
mkdir -p "$root/build-fuzz/corpus"
for bin in "$root"/build-fuzz/bin/fuzz_*; do
  name=${bin##*/fuzz_}
  work="$root/build-fuzz/corpus/$name"
  mkdir -p "$work"
  seeds="$root/tests/fuzz/corpus/$name"
  echo "== fuzz $name for ${seconds}s"
  "$bin" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$work" $( [[ -d $seeds ]] && echo "$seeds" ) 2>&1 | tail -n 12
done
