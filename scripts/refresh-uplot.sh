#!/usr/bin/env bash
# Refresh the charting library rllm view embeds (pkg/view/assets): uPlot,
# installed from npm into a temporary directory at the pinned version,
# its minified build, stylesheet and licence copied into the repo.
#   bash scripts/refresh-uplot.sh          # the pinned version
#   bash scripts/refresh-uplot.sh 1.6.33   # another one (update the NOTICE)
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-1.6.32}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install --no-audit --no-fund --ignore-scripts "uplot@$version" >/dev/null)
dist="$tmp/node_modules/uplot/dist"
cp "$dist/uPlot.iife.min.js" "$dist/uPlot.min.css" pkg/view/assets/
cp "$tmp/node_modules/uplot/LICENSE" pkg/view/assets/uPlot.LICENSE
got="$(node -p "require('$tmp/node_modules/uplot/package.json').version")"
sed -i "s/^uPlot [0-9.]*/uPlot $got/" pkg/view/assets/NOTICE
echo "uPlot $got copied into pkg/view/assets; run go test ./pkg/view"
