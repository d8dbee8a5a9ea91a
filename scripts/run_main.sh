#!/usr/bin/env bash
# The main job: set up, build, and compare allocators on the default suite of training workloads
# (the generator presets), printing the table. Extra arguments go to `stalloc sim`, e.g.
#   scripts/run_main.sh --report report/   (an HTML report with memory-over-time plots)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" "$root/build"
"$root/build/bin/stalloc" sim "$@"
