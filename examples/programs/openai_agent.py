#!/usr/bin/env python3
"""An agent program in Python with the official `openai` package.

rllm runs it once per episode: the task is one JSON object on stdin, and
OPENAI_BASE_URL / OPENAI_API_KEY point at this episode's session of the
recording gateway. The last stdout line, {"answer": ...}, is scored by
env.name's reward function. Train it on the built-in arith task:

    rllm train workflow.name=program \
        workflow.args.command="python3 examples/programs/openai_agent.py"
"""
import json
import sys

from openai import OpenAI  # reads OPENAI_BASE_URL and OPENAI_API_KEY


def main() -> None:
    task = json.loads(sys.stdin.readline())
    client = OpenAI()
    reply = client.chat.completions.create(
        model="policy",  # the gateway pins the model and sampling settings
        messages=[{"role": "user", "content": task["question"]}],
    )
    print(json.dumps({"answer": reply.choices[0].message.content or ""}))


if __name__ == "__main__":
    main()
