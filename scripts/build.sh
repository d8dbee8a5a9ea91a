#!/usr/bin/env bash
# Configures and builds stalloc. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# STALLOC_BUILD_TARGETS="a b" builds only those targets (CI's TSan step builds the concurrent tests).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja "${launcher[@]}" "$@" >/dev/null
targets=()
for t in ${STALLOC_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
