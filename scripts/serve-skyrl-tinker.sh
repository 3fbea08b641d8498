#!/usr/bin/env bash
# Start SkyRL's Tinker API server (skyrl.tinker.api) so that rllm's tinker
# backend can train on your own GPUs. Not run in CI (needs GPUs and a SkyRL
# checkout with uv). See docs/real-models.md.
#
# One node (JAX backend, all local GPUs):
#   scripts/serve-skyrl-tinker.sh [MODEL] [PORT]
#
# Several nodes (PyTorch FSDP on a Ray cluster; the API runs on the head):
#   on each worker node:  ray start --address=HEAD_IP:6379
#   on the head node:     NODES=2 GPUS_PER_NODE=8 scripts/serve-skyrl-tinker.sh MODEL PORT
#
# Environment:
#   SKYRL_DIR       SkyRL checkout (default ./SkyRL; cloned when missing)
#   BACKEND         jax | fsdp | megatron (default: jax on one node, fsdp on several)
#   NODES           number of nodes (default 1)
#   GPUS_PER_NODE   GPUs per node for the trainer (default: all visible)
#   BACKEND_CONFIG  JSON passed as --backend-config (overrides the defaults below)
#   EXTERNAL_VLLM   URL of your own vLLM to sample through (--external-inference-url)
#   CHECKPOINTS     where the server keeps checkpoints (--checkpoints-base)
#
# Then:  TINKER_API_KEY=tml-dummy rllm train backend.name=tinker \
#          backend.tinker.base_url=http://HOST:PORT backend.tinker.base_model=MODEL
set -euo pipefail
MODEL="${1:-Qwen/Qwen3-4B}"
PORT="${2:-8000}"
NODES="${NODES:-1}"
SKYRL_DIR="${SKYRL_DIR:-SkyRL}"

if [[ ! -d "$SKYRL_DIR" ]]; then
	git clone https://github.com/NovaSky-AI/SkyRL.git "$SKYRL_DIR"
fi
if [[ -z "${GPUS_PER_NODE:-}" ]]; then
	GPUS_PER_NODE="$(nvidia-smi -L 2>/dev/null | wc -l)"
fi
if (( NODES > 1 )); then
	BACKEND="${BACKEND:-fsdp}"
else
	BACKEND="${BACKEND:-jax}"
fi

args=(--base-model "$MODEL" --host 0.0.0.0 --port "$PORT")
extras=(--extra tinker)
case "$BACKEND" in
jax)
	extras+=(--extra gpu)
	;;
fsdp | megatron)
	extras+=(--extra "$BACKEND")
	args+=(--backend "$BACKEND")
	if [[ -z "${BACKEND_CONFIG:-}" ]]; then
		# The trainer spans every node; sampling runs on local vLLM engines
		# that receive the weights over NCCL after each step.
		BACKEND_CONFIG=$(printf '{"trainer.placement.policy_num_nodes": %d, "trainer.placement.policy_num_gpus_per_node": %d, "generator.inference_engine.backend": "vllm", "generator.inference_engine.run_engines_locally": true, "generator.inference_engine.weight_sync_backend": "nccl"}' "$NODES" "$GPUS_PER_NODE")
	fi
	if (( NODES > 1 )); then
		# The API and engine join the Ray cluster this node heads.
		ray status >/dev/null 2>&1 || ray start --head --port 6379
		export RAY_ADDRESS=auto
	fi
	;;
*)
	echo "serve-skyrl-tinker: BACKEND must be jax, fsdp or megatron, got $BACKEND" >&2
	exit 2
	;;
esac
if [[ -n "${BACKEND_CONFIG:-}" ]]; then
	args+=(--backend-config "$BACKEND_CONFIG")
fi
if [[ -n "${EXTERNAL_VLLM:-}" ]]; then
	args+=(--external-inference-url "$EXTERNAL_VLLM")
fi
if [[ -n "${CHECKPOINTS:-}" ]]; then
	args+=(--checkpoints-base "$CHECKPOINTS")
fi

cd "$SKYRL_DIR"
echo "serve-skyrl-tinker: $MODEL on $NODES node(s) with the $BACKEND backend at http://0.0.0.0:$PORT" >&2
exec uv run "${extras[@]}" -m skyrl.tinker.api "${args[@]}"
