#!/usr/bin/env python3
"""An agent program in Python with the official `openai` package, through
the helper rllm_program.py: an AsyncOpenAI client per episode, so the
same file runs per episode or served (workflow.args.mode=serve).

The client rllm_program hands solve knows the episode's session
(client.base_url, client.api_key); the gateway pins the model and the
sampling settings. Train it on the built-in arith task, served:

    pip install openai
    rllm train workflow.name=program workflow.args.mode=serve \
        workflow.args.command="python3 examples/programs/openai_agent.py" \
        trainer.total_training_steps=600 trainer.test_freq=100
"""
from openai import AsyncOpenAI

import rllm_program


async def solve(task, client):
    oa = AsyncOpenAI(base_url=client.base_url, api_key=client.api_key, max_retries=0)
    try:
        reply = await oa.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": task["question"]}],
        )
    finally:
        await oa.close()
    return reply.choices[0].message.content or ""


if __name__ == "__main__":
    rllm_program.run(solve)
