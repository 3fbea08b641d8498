#!/usr/bin/env bash
# Start an SGLang server for rllm rollouts. SGLang names the reasoning
# field reasoning_content and the stop match matched_stop; rllm reads both.
# Not run in CI (needs a GPU).
#
#   scripts/serve-sglang.sh [MODEL] [PORT]
#
# Flags checked against SGLang (github.com/sgl-project/sglang,
# python/sglang/srt/server_args.py check_lora_server_args, 2026):
#   --enable-lora with no --lora-paths needs both --max-lora-rank and
#   --lora-target-modules, else SGLang refuses to start ("When no initial
#   --lora-paths is provided, you need to specify both --max-lora-rank and
#   --lora-target-modules for LoRA initialization."); "all" must be the only
#   module named and stands for every supported one.
#   --max-loras-per-batch must be positive (default 8).
#
# Environment:
#   MAX_LORA_RANK       --max-lora-rank (default 64; ≥ backend.tinker.lora_rank)
#   LORA_TARGET_MODULES --lora-target-modules (default all)
set -euo pipefail
MODEL="${1:-Qwen/Qwen3-4B}"
PORT="${2:-30000}"
MAX_LORA_RANK="${MAX_LORA_RANK:-64}"
read -r -a targets <<<"${LORA_TARGET_MODULES:-all}"
[[ "$MAX_LORA_RANK" =~ ^[1-9][0-9]*$ ]] || {
	echo "serve-sglang: MAX_LORA_RANK must be a positive integer, got $MAX_LORA_RANK" >&2
	exit 2
}
if [[ " ${targets[*]} " == *" all "* && ${#targets[@]} -gt 1 ]]; then
	echo "serve-sglang: LORA_TARGET_MODULES: 'all' must be the only module named (SGLang refuses it with others)" >&2
	exit 2
fi
exec python -m sglang.launch_server \
	--model-path "$MODEL" \
	--port "$PORT" \
	--reasoning-parser qwen3 \
	--tool-call-parser qwen25 \
	--enable-lora --max-lora-rank "$MAX_LORA_RANK" --lora-target-modules "${targets[@]}" \
	--max-loras-per-batch 2
