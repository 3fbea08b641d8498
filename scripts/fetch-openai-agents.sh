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

exec "$(dirname "${BASH_SOURCE[0]}")/npm-testdata.sh" fetch-openai-agents node-agents @openai/agents '0\.20\.' "@openai/agents@0.20" "zod@4"
