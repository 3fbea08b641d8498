#!/usr/bin/env bash
# Install the official Anthropic SDK for Node (@anthropic-ai/sdk 1.x) that
# the agent-program examples' test drives through the gateway's
# /v1/messages (examples/programs, TestAnthropicNodeProgram). It goes into
# testdata/node-anthropic/node_modules at the repository root
# (git-ignored). Idempotent: once a 1.x SDK is there nothing is fetched,
# so it also works offline after the first run.
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/npm-testdata.sh" fetch-anthropic-node node-anthropic @anthropic-ai/sdk '1\.' "@anthropic-ai/sdk@1"
