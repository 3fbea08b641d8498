#!/usr/bin/env python3
"""An agent program with nothing but Python's standard library: one chat
call over HTTP to the session rllm gives it. The smallest agent program
there is, and the cheapest to start (no SDK import), which is why the
benchmark of docs/benchmarks.md trains it. Train it on arith:

    rllm train workflow.name=program \
        workflow.args.command="python3 examples/programs/stdlib_agent.py"
"""
import json
import os
import sys
import urllib.request


def main() -> None:
    task = json.loads(sys.stdin.readline())
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({
            "model": "policy",
            "messages": [{"role": "user", "content": task["question"]}],
        }).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        reply = json.load(resp)
    print(json.dumps({"answer": reply["choices"][0]["message"]["content"] or ""}))


if __name__ == "__main__":
    main()
