#!/usr/bin/env bash
# Install the official OpenAI SDK for Node (openai 6.x) that the
# compatibility test of `rllm serve` drives (pkg/backend/local/openai,
# TestOpenAINodeSDK). It goes into testdata/node/node_modules at the
# repository root (git-ignored). Idempotent: once a 6.x SDK is there,
# nothing is fetched, so it also works offline after the first run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/testdata/node"
pkg="$dest/node_modules/openai/package.json"

if [[ -s "$pkg" ]] && grep -q '"version": "6\.' "$pkg"; then
	exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "fetch-openai-node: npm is needed to install the openai package (install Node.js/npm)" >&2
	exit 1
fi
mkdir -p "$dest"
(cd "$dest" && npm install --silent --no-save --no-package-lock --no-audit --no-fund "openai@6" >/dev/null)
echo "fetch-openai-node: openai $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$pkg" | head -1) ready in testdata/node/"
