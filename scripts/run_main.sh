#!/usr/bin/env bash
# The main job: set up, build, and compare allocators on the default suite of training workloads
# (the generator presets), printing the table. Extra arguments go to `stalloc sim`, e.g.
#   scripts/run_main.sh --report report/   (an HTML report with memory-over-time plots)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
# Only the CLI the table needs: the tests and benchmarks are most of the build, and
# scripts/run_tests.sh builds them in the same build directory.
STALLOC_BUILD_TARGETS=stalloc "$root/scripts/build.sh" "$root/build"
"$root/build/bin/stalloc" sim "$@"
