#!/usr/bin/env python3
"""Guess the number: an rllm environment in Python, standard library only.

rllm starts this program (env.name=exec, env.args.command=[python3,
guess_env.py]) and talks to it in JSON lines over stdin/stdout. Each line
rllm sends names an episode, so one process serves many episodes at once:

  {"id": "e1", "type": "reset", "data": {"task": {...row...}, "seed": 7}}
  {"id": "e1", "type": "step",  "data": {"action": "50"}}
  {"id": "e1", "type": "close"}

and each answer is an observation (or an error) for the same id:

  {"id": "e1", "type": "observation",
   "data": {"observation": "...", "reward": 0, "done": false, "info": {}}}
  {"id": "e1", "type": "error", "data": {"message": "..."}}

stdout is the protocol and nothing else: log to stderr (rllm shows it).
"""

import json
import random
import re
import sys

MAX_GUESSES = 10


def send(frame):
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def observation(eid, text, reward=0.0, done=False, info=None):
    send({"id": eid, "type": "observation",
          "data": {"observation": text, "reward": reward, "done": done, "info": info or {}}})


def reset(episodes, eid, data):
    task = data.get("task") or {}
    rng = random.Random(data.get("seed", 0))
    lo, hi = int(task.get("lo", 1)), int(task.get("hi", 100))
    if lo > hi:
        raise ValueError(f"task has lo {lo} > hi {hi}")
    secret = int(task["secret"]) if "secret" in task else rng.randint(lo, hi)
    episodes[eid] = {"secret": secret, "guesses": 0}
    observation(eid, f"I am thinking of a number between {lo} and {hi}. "
                     f"Answer with one number; you have {MAX_GUESSES} guesses.")


def step(episodes, eid, data):
    ep = episodes.get(eid)
    if ep is None:
        raise KeyError(f"episode {eid} was never reset")
    ep["guesses"] += 1
    numbers = re.findall(r"-?\d+", str(data.get("action", "")))
    out_of_guesses = ep["guesses"] >= MAX_GUESSES
    if not numbers:
        observation(eid, "That was not a number.", 0.0, out_of_guesses, {"format_error": "no number"})
        return
    guess = int(numbers[-1])
    if guess == ep["secret"]:
        observation(eid, "Found it!", 1.0, True, {"is_correct": True, "guesses": ep["guesses"]})
    elif out_of_guesses:
        observation(eid, f"Out of guesses; it was {ep['secret']}.", 0.0, True, {"is_correct": False})
    else:
        hint = "higher" if guess < ep["secret"] else "lower"
        observation(eid, f"{guess} is wrong; go {hint}.")


def main():
    episodes = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError as e:
            print(f"guess_env: ignoring a line that is not JSON: {e}", file=sys.stderr)
            continue
        eid, kind, data = msg.get("id"), msg.get("type"), msg.get("data") or {}
        try:
            if kind == "reset":
                reset(episodes, eid, data)
            elif kind == "step":
                step(episodes, eid, data)
            elif kind == "close":
                episodes.pop(eid, None)
            else:
                raise ValueError(f"unknown message type {kind!r}")
        except Exception as e:  # the episode fails, the process goes on
            send({"id": eid, "type": "error", "data": {"message": f"{type(e).__name__}: {e}"}})


if __name__ == "__main__":
    main()
