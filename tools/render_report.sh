#!/usr/bin/env bash
# Screenshots an HTML report (stalloc sim --report DIR) with headless Chromium, to look at it
# without a desktop. Usage: tools/render_report.sh REPORT.html|DIR OUT.png [WIDTH,HEIGHT]
# Needs the Debian package chromium (apt-get install chromium).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 REPORT.html|DIR OUT.png [WIDTH,HEIGHT]" >&2
  exit 2
fi
page=$1
out=$2
size=${3:-1400,2000}
[ -d "$page" ] && page=$page/index.html
[ -f "$page" ] || { echo "$0: no such report: $page" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "$0: chromium not found (apt-get install chromium)" >&2; exit 2; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --screenshot="$(realpath -m "$out")" --window-size="$size" \
  "file://$(realpath "$page")" > /dev/null 2>&1
[ -s "$out" ] || { echo "$0: chromium wrote no screenshot" >&2; exit 1; }
echo "$out"
