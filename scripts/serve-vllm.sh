#!/usr/bin/env bash
# Start a vLLM OpenAI-compatible server the way rllm expects it: token ids
# and logprobs returned, tool calls parsed, runtime LoRA enabled so the
# trainer can publish new weights by name. Not run in CI (needs a GPU).
#
#   scripts/serve-vllm.sh [MODEL] [PORT]
#   rllm eval --data tasks.jsonl --n 8 rollout.endpoints='[http://localhost:8000]' rollout.model=MODEL
set -euo pipefail
MODEL="${1:-Qwen/Qwen3-4B}"
PORT="${2:-8000}"
export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
exec vllm serve "$MODEL" \
	--port "$PORT" \
	--return-tokens-as-token-ids \
	--enable-auto-tool-choice --tool-call-parser hermes \
	--reasoning-parser qwen3 \
	--enable-lora --max-lora-rank 64 --max-loras 2 \
	--generation-config vllm
