#!/usr/bin/env bash
# Render a results folder's leaderboard.html in headless Chromium and save a PNG screenshot, to check
# that the page shows its tables offline (the row table inflates its embedded rows once the page has
# loaded: the virtual-time budget lets that finish before the shot).
#   benchmarks/screenshot_leaderboard.sh results/default [out.png] [filters, e.g. 'model=tiny-llama&attack=ezmia']
set -euo pipefail
dir=${1:?usage: $0 RESULTS_DIR [OUT.png] [FILTERS]}
out=${2:-$dir/leaderboard.png}
filters=${3:+#$3}
page=$(cd "$dir" && pwd)/leaderboard.html
[ -f "$page" ] || { echo "no leaderboard.html in $dir (run: privauditor report $dir)" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "no Chromium found (Debian: apt-get install chromium)" >&2; exit 2; }
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=10000 --window-size=1280,1800 \
    --screenshot="$out" "file://$page$filters" 2>/dev/null
[ -s "$out" ] || { echo "Chromium wrote no screenshot" >&2; exit 1; }
echo "screenshot: $out"
