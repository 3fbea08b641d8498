#!/usr/bin/env bash
# Install npm packages that a test drives into testdata/DIR/node_modules at
# the repository root (git-ignored); the fetch-*.sh scripts call it.
#
#   npm-testdata.sh NAME DIR PACKAGE VERSION_RE SPEC...
#
# NAME prefixes the messages; PACKAGE is the package whose installed
# version (matched against the regular expression VERSION_RE, e.g. '1\.')
# says it is there; SPEC... are what `npm install` is given (PACKAGE@range
# first, then what else the test needs, each of which must be present too).
# Idempotent: once they are there nothing is fetched, so it also works
# offline after the first run.
set -euo pipefail

name="$1" dir="$2" main="$3" version="$4"
shift 4
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/testdata/$dir"
pkg="$dest/node_modules/$main/package.json"

installed() {
	[[ -s "$pkg" ]] && grep -q "\"version\": \"$version" "$pkg" || return 1
	local spec
	for spec in "${@:2}"; do
		[[ -d "$dest/node_modules/${spec%@*}" ]] || return 1
	done
}
if installed "$@"; then
	exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "$name: npm is needed to install $main (install Node.js/npm)" >&2
	exit 1
fi
mkdir -p "$dest"
(cd "$dest" && npm install --silent --no-save --no-package-lock --no-audit --no-fund "$@" >/dev/null)
echo "$name: $main $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$pkg" | head -1) ready in testdata/$dir/"
