#!/usr/bin/env python3
"""An agent program with nothing but Python's standard library: one chat
call to the session rllm gives it, through the helper rllm_program.py
(an asyncio HTTP client, no SDK import). The same file runs per episode
or served (docs/gateway.md).

Train it on arith, served: one Python process for the whole run, the
warm-up on the built-in arith agent; about 10 minutes on this project's
2-core machine (docs/benchmarks.md), validation pass@1 0.09 -> 0.53:

    rllm train workflow.name=program workflow.args.mode=serve \
        workflow.args.command="python3 examples/programs/stdlib_agent.py" \
        trainer.total_training_steps=600 trainer.test_freq=100

Per episode (workflow.args.mode=per_episode, the default) the same run
starts a Python process for each of its 153,600 training episodes: 6.4
CPU-hours of Python start-up alone, many hours here. `rllm train
--dry-run ...` prints the episode count and that cost before it runs.
"""
import rllm_program


async def solve(task, client):
    reply = await client.chat([{"role": "user", "content": task["question"]}])
    return reply["choices"][0]["message"]["content"] or ""


if __name__ == "__main__":
    rllm_program.run(solve)
