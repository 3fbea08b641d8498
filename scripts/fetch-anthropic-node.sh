#!/usr/bin/env bash
# Install the official Anthropic SDK for Node (@anthropic-ai/sdk 1.x) that
# the agent-program examples' test drives through the gateway's
# /v1/messages (examples/programs, TestAnthropicNodeProgram). It goes into
# testdata/node-anthropic/node_modules at the repository root
# (git-ignored). Idempotent: once a 1.x SDK is there nothing is fetched,
# so it also works offline after the first run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/testdata/node-anthropic"
pkg="$dest/node_modules/@anthropic-ai/sdk/package.json"

if [[ -s "$pkg" ]] && grep -q '"version": "1\.' "$pkg"; then
	exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "fetch-anthropic-node: npm is needed to install @anthropic-ai/sdk (install Node.js/npm)" >&2
	exit 1
fi
mkdir -p "$dest"
(cd "$dest" && npm install --silent --no-save --no-package-lock --no-audit --no-fund "@anthropic-ai/sdk@1" >/dev/null)
echo "fetch-anthropic-node: @anthropic-ai/sdk $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$pkg" | head -1) ready in testdata/node-anthropic/"
