#!/usr/bin/env bash
# Render a board site's overview and history pages in headless Chromium: the DOM Chromium builds must
# hold each page's content (the techniques' ranking; a release or the unreleased entry), and each page
# is saved as a PNG screenshot.
#   benchmarks/screenshot_board.sh SITE [OUT_DIR]     (SITE: privauditor board build STORE --out SITE)
set -euo pipefail
site=$(cd "${1:?usage: $0 SITE [OUT_DIR]}" && pwd)
out=${2:-$site}
mkdir -p "$out"
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "no Chromium found (Debian: apt-get install chromium)" >&2; exit 2; }
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars)
for page in index:Techniques history:unreleased; do
  name=${page%%:*} expected=${page#*:}
  [ -f "$site/$name.html" ] || { echo "no $name.html in $site (run: privauditor board build)" >&2; exit 2; }
  "$browser" "${flags[@]}" --dump-dom "file://$site/$name.html" 2>/dev/null | grep -q "$expected" \
    || { echo "$name.html: Chromium's DOM does not hold '$expected'" >&2; exit 1; }
  "$browser" "${flags[@]}" --window-size=1280,2400 --screenshot="$out/$name.png" "file://$site/$name.html" 2>/dev/null
  [ -s "$out/$name.png" ] || { echo "Chromium wrote no screenshot of $name.html" >&2; exit 1; }
  echo "$name.html renders ('$expected' in its DOM): $out/$name.png"
done
