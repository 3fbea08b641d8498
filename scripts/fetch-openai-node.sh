#!/usr/bin/env bash
# Install the official OpenAI SDK for Node (openai 6.x) that the
# compatibility test of `rllm serve` drives (pkg/backend/local/openai,
# TestOpenAINodeSDK). It goes into testdata/node/node_modules at the
# repository root (git-ignored). Idempotent: once a 6.x SDK is there,
# nothing is fetched, so it also works offline after the first run.
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/npm-testdata.sh" fetch-openai-node node openai '6\.' "openai@6"
