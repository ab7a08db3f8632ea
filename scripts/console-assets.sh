#!/usr/bin/env bash
# Rebuild the console's bundled npm files (docs/console.md, "Rebuilding the bundled files"):
# install the exact versions of console-assets/package-lock.json with `npm ci`, then copy the built,
# minified files into twlog/console/static/vendor/, which is committed, so users never need npm.
# To move to a newer version: edit console-assets/package.json, run `npm install` there (it rewrites
# the lock file), then this script, and commit all three.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v npm >/dev/null || { echo "console-assets: npm is missing (Debian: apt-get install npm)" >&2; exit 1; }
(cd console-assets && npm ci --no-audit --no-fund --silent)
vendor=twlog/console/static/vendor
mkdir -p "$vendor"
src=console-assets/node_modules/uplot
cp "$src/dist/uPlot.iife.min.js" "$vendor/uPlot.iife.min.js"
cp "$src/dist/uPlot.min.css" "$vendor/uPlot.min.css"
cp "$src/LICENSE" "$vendor/uPlot.LICENSE"
version=$(node -p "require('./$src/package.json').version")
echo "uPlot $version (MIT): uPlot.iife.min.js, uPlot.min.css, uPlot.LICENSE" > "$vendor/VERSIONS"
echo "console-assets: copied uPlot $version into $vendor" >&2
