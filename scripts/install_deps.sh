#!/usr/bin/env bash
# Installs the Debian packages stalloc needs, only those missing. Idempotent; needs root or sudo
# when something is missing.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev libtbb-dev python3
  python3-venv python3-pip python3-setuptools python3-wheel)
if [[ "${STALLOC_WITH_CLANG:-0}" == 1 ]]; then packages+=(clang libclang-rt-dev); fi
if [[ "${STALLOC_WITH_CHROMIUM:-0}" == 1 ]]; then packages+=(chromium); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "stalloc: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
