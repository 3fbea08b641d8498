#!/usr/bin/env bash
# Start an SGLang server for rllm rollouts. SGLang names the reasoning
# field reasoning_content and the stop match matched_stop; rllm reads both.
# Not run in CI (needs a GPU).
#
#   scripts/serve-sglang.sh [MODEL] [PORT]
set -euo pipefail
MODEL="${1:-Qwen/Qwen3-4B}"
PORT="${2:-30000}"
exec python -m sglang.launch_server \
	--model-path "$MODEL" \
	--port "$PORT" \
	--reasoning-parser qwen3 \
	--tool-call-parser qwen25 \
	--enable-lora --max-lora-rank 64 --max-loras-per-batch 2
