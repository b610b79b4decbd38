#!/usr/bin/env bash
# Screenshot of a kvsim report.html with headless Chromium (Debian package `chromium`), fully
# offline: no network, no GPU, a throwaway profile.
# Usage: scripts/screenshot-report.sh REPORT.html OUT.png [WIDTH,HEIGHT]
set -euo pipefail
if [[ $# -lt 2 ]]; then
    echo "usage: $0 REPORT.html OUT.png [WIDTH,HEIGHT]" >&2
    exit 2
fi
report=$(realpath "$1")
out=$(realpath -m "$2")
size=${3:-1400,2400}
[[ -f "$report" ]] || { echo "$0: no such file: $1" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$browser" ]]; then
    echo "$0: chromium not found (Debian: apt-get install -y chromium)" >&2
    exit 1
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$profile" --hide-scrollbars \
    --screenshot="$out" --window-size="$size" "file://$report" >/dev/null 2>&1
[[ -s "$out" ]] || { echo "$0: chromium wrote no screenshot" >&2; exit 1; }
echo "$out"
