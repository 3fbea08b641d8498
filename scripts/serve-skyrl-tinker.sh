#!/usr/bin/env bash
# Start SkyRL's Tinker API server (skyrl.tinker.api) so that rllm's tinker
# backend can train on your own GPUs. Not run in CI (needs GPUs and uv).
# See docs/real-models.md ("SkyRL").
#
# Every flag below was checked against SkyRL at commit a9564572
# (github.com/NovaSky-AI/SkyRL, 2026-08-21):
#   skyrl/tinker/config.py   EngineConfig: --base-model (required),
#                            --backend (jax | fsdp | megatron; default jax,
#                            passed always: the quickstart marks it required),
#                            --backend-config (JSON), --checkpoints-base
#                            (default /tmp/skyrl_checkpoints),
#                            --external-inference-url,
#                            --external-inference-lora-base (default
#                            /tmp/lora_models)
#   skyrl/tinker/api.py      --host (default 0.0.0.0), --port (default 8000)
#   skyrl/backends/jax.py    JaxBackendConfig (extra keys are refused):
#                            tensor_parallel_size (default 1: a one-device
#                            mesh, whatever GPUs are visible), max_lora_rank
#                            (default 32), max_lora_adapters (default 32)
#   skyrl/backends/skyrl_train_backend.py  with
#                            trainer.placement.colocate_all (default true,
#                            skyrl/train/config/config.py) it asserts
#                            "num_policy_gpus and num_rollout_gpus must be the
#                            same when colocating all models": policy GPUs
#                            (policy_num_nodes × policy_num_gpus_per_node)
#                            must equal generator.inference_engine.num_engines
#                            × tensor_parallel_size (× pipeline and data
#                            parallel sizes, 1 here)
#   pyproject.toml           extras: jax + gpu + tinker for JAX (the JAX
#                            multi-node example), tinker + fsdp|megatron for
#                            PyTorch (docs/content/docs/tinker/quickstart.mdx)
#   skyrl/tinker/extra/external_inference.py  with --external-inference-url
#                            each sampled checkpoint is unpacked to
#                            <lora base>/<model_id>_<checkpoint_id> and asked
#                            of vLLM by that name: vLLM must be started with
#                            VLLM_PLUGINS=lora_filesystem_resolver and
#                            VLLM_LORA_RESOLVER_CACHE_DIR=<lora base>/ on a
#                            filesystem both see (scripts/serve-vllm.sh
#                            LORA_RESOLVER_DIR=...)
#
# One node, JAX, every visible GPU as one tensor-parallel mesh:
#   scripts/serve-skyrl-tinker.sh [MODEL] [PORT]
# One node, PyTorch FSDP, 8 GPUs colocated (8 vLLM engines of 1 GPU):
#   BACKEND=fsdp scripts/serve-skyrl-tinker.sh Qwen/Qwen3-8B
# Two nodes of 8 GPUs (FSDP on a Ray cluster; run this on the head):
#   on each worker node:  ray start --address=HEAD_IP:6379
#   on the head node:     NODES=2 GPUS_PER_NODE=8 scripts/serve-skyrl-tinker.sh Qwen/Qwen3-8B
# Sampling through your own vLLM (JAX trains, vLLM samples):
#   LORA_RESOLVER_DIR=/shared/lora_models scripts/serve-vllm.sh Qwen/Qwen3-4B 7999   # on the vLLM host
#   EXTERNAL_VLLM=http://VLLM_HOST:7999 LORA_DIR=/shared/lora_models scripts/serve-skyrl-tinker.sh Qwen/Qwen3-4B
#
# Environment:
#   SKYRL_DIR       SkyRL checkout (default ./SkyRL; cloned at SKYRL_REF when missing)
#   SKYRL_REF       commit to check out when cloning (default a9564572)
#   BACKEND         jax | fsdp | megatron (default: jax on one node, fsdp on several)
#   NODES           number of nodes (default 1)
#   GPUS_PER_NODE   GPUs per node for the trainer (default: all visible)
#   TP              tensor-parallel size of each vLLM engine (fsdp/megatron; default 1)
#   LORA_RANK       the largest LoRA rank rllm will ask for (JAX max_lora_rank;
#                   default 32, rllm's backend.tinker.lora_rank default)
#   BACKEND_CONFIG  JSON passed as --backend-config (replaces the defaults below)
#   EXTERNAL_VLLM   URL of your own vLLM to sample through (--external-inference-url)
#   LORA_DIR        where adapters are unpacked for it (--external-inference-lora-base;
#                   default /tmp/lora_models); the vLLM's VLLM_LORA_RESOLVER_CACHE_DIR
#   CHECKPOINTS     where the server keeps checkpoints (--checkpoints-base); SkyRL
#                   ignores ttl_seconds, so every step's sampler snapshot stays here
#
# Then:  TINKER_API_KEY=tml-dummy rllm train backend.name=tinker \
#          backend.tinker.base_url=http://HOST:PORT backend.tinker.base_model=MODEL
set -euo pipefail
MODEL="${1:-Qwen/Qwen3-4B}"
PORT="${2:-8000}"
NODES="${NODES:-1}"
TP="${TP:-1}"
LORA_RANK="${LORA_RANK:-32}"
SKYRL_DIR="${SKYRL_DIR:-SkyRL}"
SKYRL_REF="${SKYRL_REF:-a9564572}"

die() {
	echo "serve-skyrl-tinker: $*" >&2
	exit 2
}
int() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, got '$2'"; }

if [[ ! -d "$SKYRL_DIR" ]]; then
	git clone https://github.com/NovaSky-AI/SkyRL.git "$SKYRL_DIR"
	git -C "$SKYRL_DIR" checkout --quiet "$SKYRL_REF"
fi
if [[ -z "${GPUS_PER_NODE:-}" ]]; then
	GPUS_PER_NODE="$(nvidia-smi -L 2>/dev/null | wc -l)"
fi
int NODES "$NODES"
int GPUS_PER_NODE "$GPUS_PER_NODE"
int TP "$TP"
int LORA_RANK "$LORA_RANK"
if ((NODES > 1)); then
	BACKEND="${BACKEND:-fsdp}"
else
	BACKEND="${BACKEND:-jax}"
fi

args=(--base-model "$MODEL" --backend "$BACKEND" --host 0.0.0.0 --port "$PORT")
case "$BACKEND" in
jax)
	((NODES == 1)) || die "BACKEND=jax runs on one node here (multi-node JAX needs coordinator processes: see SkyRL's skyrl-tx README); use BACKEND=fsdp"
	extras=(--extra jax --extra gpu --extra tinker)
	if [[ -z "${BACKEND_CONFIG:-}" ]]; then
		# Without tensor_parallel_size the mesh is one device: the other
		# GPUs would sit idle.
		BACKEND_CONFIG=$(printf '{"tensor_parallel_size": %d, "max_lora_rank": %d}' "$GPUS_PER_NODE" "$LORA_RANK")
	fi
	;;
fsdp | megatron)
	extras=(--extra tinker --extra "$BACKEND")
	if [[ -z "${BACKEND_CONFIG:-}" ]]; then
		gpus=$((NODES * GPUS_PER_NODE))
		((gpus % TP == 0)) || die "TP=$TP does not divide the $gpus policy GPUs; colocate_all needs num_engines × TP = NODES × GPUS_PER_NODE"
		# colocate_all (SkyRL's default): the vLLM engines share the policy
		# GPUs and get the weights over NCCL after each step, so their GPUs
		# must add up to the policy's.
		BACKEND_CONFIG=$(printf '{"trainer.placement.colocate_all": true, "trainer.placement.policy_num_nodes": %d, "trainer.placement.policy_num_gpus_per_node": %d, "generator.inference_engine.num_engines": %d, "generator.inference_engine.tensor_parallel_size": %d, "generator.inference_engine.backend": "vllm", "generator.inference_engine.run_engines_locally": true, "generator.inference_engine.weight_sync_backend": "nccl"}' \
			"$NODES" "$GPUS_PER_NODE" "$((gpus / TP))" "$TP")
	fi
	if ((NODES > 1)); then
		# The API and engine join the Ray cluster this node heads.
		ray status >/dev/null 2>&1 || ray start --head --port 6379
		export RAY_ADDRESS=auto
	fi
	;;
*)
	die "BACKEND must be jax, fsdp or megatron, got $BACKEND"
	;;
esac
args+=(--backend-config "$BACKEND_CONFIG")
if [[ -n "${EXTERNAL_VLLM:-}" ]]; then
	LORA_DIR="${LORA_DIR:-/tmp/lora_models}"
	args+=(--external-inference-url "$EXTERNAL_VLLM" --external-inference-lora-base "$LORA_DIR")
	echo "serve-skyrl-tinker: sampling through $EXTERNAL_VLLM; start that vLLM with VLLM_PLUGINS=lora_filesystem_resolver VLLM_LORA_RESOLVER_CACHE_DIR=$LORA_DIR/ (scripts/serve-vllm.sh with LORA_RESOLVER_DIR=$LORA_DIR), on a filesystem both hosts see" >&2
fi
if [[ -n "${CHECKPOINTS:-}" ]]; then
	args+=(--checkpoints-base "$CHECKPOINTS")
fi

cd "$SKYRL_DIR"
echo "serve-skyrl-tinker: $MODEL on $NODES node(s) × $GPUS_PER_NODE GPU(s) with the $BACKEND backend at http://0.0.0.0:$PORT (--backend-config $BACKEND_CONFIG)" >&2
exec uv run "${extras[@]}" -m skyrl.tinker.api "${args[@]}"
