#!/usr/bin/env bash
# Start a vLLM OpenAI-compatible server the way rllm expects it: token ids
# and logprobs returned, tool calls parsed, runtime LoRA enabled so the
# trainer can publish new weights by name. Not run in CI (needs a GPU).
#
#   scripts/serve-vllm.sh [MODEL] [PORT]
#   rllm eval --data tasks.jsonl --n 8 rollout.endpoints='[http://localhost:8000]' rollout.model=MODEL
#
# Flags checked against vLLM (github.com/vllm-project/vllm, vllm/config/lora.py
# at 01230b40; vllm/entrypoints/openai serving code and vllm/envs.py of the
# same period):
#   --max-lora-rank    MaxLoRARanks: only 1, 8, 16, 32, 64, 128, 256, 320 or 512
#                      (must be ≥ the rank rllm trains, backend.tinker.lora_rank)
#   --max-loras        ≥ 1 adapters in one batch (LoRAConfig.max_loras)
#   VLLM_ALLOW_RUNTIME_LORA_UPDATING=True  enables /v1/load_lora_adapter and
#                      /v1/unload_lora_adapter (rllm's per-step publishing)
#   VLLM_PLUGINS=lora_filesystem_resolver + VLLM_LORA_RESOLVER_CACHE_DIR  load
#                      an adapter named in a request from that directory: what
#                      SkyRL's --external-inference-url needs (SkyRL a9564572
#                      skyrl/tinker/extra/external_inference.py unpacks each
#                      checkpoint to <dir>/<model_id>_<checkpoint_id>)
#
# Environment:
#   MAX_LORA_RANK      --max-lora-rank (default 64)
#   MAX_LORAS          --max-loras (default 2: the adapter in use and the next)
#   LORA_RESOLVER_DIR  serve SkyRL's adapters from this directory (on a
#                      filesystem SkyRL's server writes too; its
#                      --external-inference-lora-base)
set -euo pipefail
MODEL="${1:-Qwen/Qwen3-4B}"
PORT="${2:-8000}"
MAX_LORA_RANK="${MAX_LORA_RANK:-64}"
MAX_LORAS="${MAX_LORAS:-2}"
case "$MAX_LORA_RANK" in
1 | 8 | 16 | 32 | 64 | 128 | 256 | 320 | 512) ;;
*)
	echo "serve-vllm: MAX_LORA_RANK must be one of 1 8 16 32 64 128 256 320 512 (vLLM's MaxLoRARanks), got $MAX_LORA_RANK" >&2
	exit 2
	;;
esac
[[ "$MAX_LORAS" =~ ^[1-9][0-9]*$ ]] || {
	echo "serve-vllm: MAX_LORAS must be a positive integer, got $MAX_LORAS" >&2
	exit 2
}
export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
if [[ -n "${LORA_RESOLVER_DIR:-}" ]]; then
	mkdir -p "$LORA_RESOLVER_DIR"
	export VLLM_PLUGINS=lora_filesystem_resolver
	export VLLM_LORA_RESOLVER_CACHE_DIR="${LORA_RESOLVER_DIR%/}/"
fi
exec vllm serve "$MODEL" \
	--port "$PORT" \
	--return-tokens-as-token-ids \
	--enable-auto-tool-choice --tool-call-parser hermes \
	--reasoning-parser qwen3 \
	--enable-lora --max-lora-rank "$MAX_LORA_RANK" --max-loras "$MAX_LORAS" \
	--generation-config vllm
