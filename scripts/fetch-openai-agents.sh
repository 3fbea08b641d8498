#!/usr/bin/env bash
# Install the OpenAI Agents SDK for JavaScript (@openai/agents 0.20, with
# zod 4 and the openai 7 package it depends on) that the agent-program
# examples' test drives (examples/programs, TestAgentsSDKProgram). It goes
# into testdata/node-agents/node_modules at the repository root
# (git-ignored), apart from testdata/node (openai 6, used by the `rllm
# serve` and plain-SDK tests) because the Agents SDK needs openai 7.
# Idempotent: once @openai/agents 0.20 is there nothing is fetched, so it
# also works offline after the first run; without npm or the network it
# says so and leaves the tests to skip (they fail under CI instead).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/testdata/node-agents"
pkg="$dest/node_modules/@openai/agents/package.json"

if [[ -s "$pkg" ]] && grep -q '"version": "0\.20\.' "$pkg" && [[ -d "$dest/node_modules/zod" ]]; then
	exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "fetch-openai-agents: npm is needed to install @openai/agents (install Node.js/npm)" >&2
	exit 1
fi
mkdir -p "$dest"
(cd "$dest" && npm install --silent --no-save --no-package-lock --no-audit --no-fund "@openai/agents@0.20" "zod@4" >/dev/null)
echo "fetch-openai-agents: @openai/agents $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$pkg" | head -1) ready in testdata/node-agents/"
