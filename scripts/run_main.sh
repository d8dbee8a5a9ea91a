#!/usr/bin/env bash
# The main job: set up, build, and run the simulator's default suite on the host.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" "$root/build"
"$root/build/bin/stalloc" vmm-demo
