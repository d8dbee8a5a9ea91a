#!/usr/bin/env bash
# The folders depend on each other one way only (docs/architecture.md, "Where each piece lives"):
# every #include "..." in the .h and .cpp files under common, vmm, trace, workload, planner/*, sim, src, torch_ext
# and tools must be root-relative and name a folder that its own folder may depend on. Prints
# FILE:LINE and the forbidden arrow for each one that does not, and exits 1.
# Usage: check_includes.sh ROOT        (CTest: layout.check_includes)
# After checking ROOT it proves it can fail: a copy of ROOT with one forbidden include planted
# must be refused, with that arrow named.
set -euo pipefail

# Folder -> the folders it may include besides itself; "*" for any.
declare -A allowed=(
  [common]=""
  [vmm]="common"
  [trace]="common"
  [planner/dsa]="common"
  [workload]="trace common"
  [planner/chunk]="trace planner/dsa common"
  [src]="planner/chunk trace planner/dsa vmm common"
  [sim]="src trace planner/dsa workload planner/chunk vmm common"
  [torch_ext]="src trace planner/dsa workload planner/chunk vmm common"
  [tools]="*"
)

# A path relative to the root -> $folder, the folder of the table it belongs to (planner/X or the
# first component). A variable, not output: a subshell per include takes seconds over the tree.
folder_of() {
  case $1 in
    planner/*/*) folder=${1#planner/}; folder=planner/${folder%%/*} ;;
    *) folder=${1%%/*} ;;
  esac
}

# Checks the tree at $1; prints one line per violation, returns 1 if there is any.
check() {
  local root=$1 bad=0 dir from file line text path to folder
  local include_re='^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)"'
  local dirs=(common vmm trace workload sim src torch_ext tools)
  for dir in "$root"/planner/*/; do
    dirs+=("planner/$(basename "$dir")")
  done
  for dir in "${dirs[@]}"; do
    if [[ ! -d $root/$dir ]]; then
      echo "$dir: missing (the table in tests/layout/check_includes.sh names it)"
      bad=1
    elif [[ ! -v allowed[$dir] ]]; then
      echo "$dir: a folder the table in tests/layout/check_includes.sh does not know"
      bad=1
    fi
  done
  if [[ -n $(find "$root/planner" -maxdepth 1 -type f \( -name '*.h' -o -name '*.cpp' \)) ]]; then
    echo "planner/: sources belong in one of its folders"
    bad=1
  fi
  while IFS=: read -r file line text; do
    [[ $text =~ $include_re ]] || continue
    path=${BASH_REMATCH[1]}
    folder_of "$file"
    from=$folder
    if [[ $path != */* || $path == ./* || $path == ../* ]]; then
      echo "$file:$line: #include \"$path\" is not root-relative"
      bad=1
      continue
    fi
    folder_of "$path"
    to=$folder
    [[ $to == "$from" || ${allowed[$from]:-} == "*" ]] && continue
    if [[ " ${allowed[$from]:-} " != *" $to "* ]]; then
      echo "$file:$line: $from -> $to is not allowed (#include \"$path\")"
      bad=1
    fi
  done < <(cd "$root" && find "${dirs[@]}" -type f \( -name '*.h' -o -name '*.cpp' \) -print0 2>/dev/null |
             xargs -0 grep -HnE "$include_re")
  return $bad
}

root=$(cd "${1:?usage: check_includes.sh ROOT}" && pwd)
check "$root" || { echo "layout: forbidden includes above" >&2; exit 1; }

# The check must be able to fail: plant an include of the simulator in the trace model.
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
for dir in common vmm trace workload planner sim src torch_ext tools; do
  cp -r "$root/$dir" "$copy/"
done
echo '#include "sim/simulator.h"' >>"$copy/trace/trace.h"
planted="trace/trace.h:$(wc -l <"$copy/trace/trace.h"): trace -> sim is not allowed"
if out=$(check "$copy"); then
  echo "layout: the check accepted a planted include of sim/ in trace/trace.h" >&2
  exit 1
fi
if [[ $out != "$planted"* ]]; then
  echo "layout: the planted include was refused, but not as expected:" >&2
  echo "  expected: $planted" >&2
  echo "  got:      $out" >&2
  exit 1
fi
echo "layout: every include follows the arrows; a planted trace -> sim was refused"
