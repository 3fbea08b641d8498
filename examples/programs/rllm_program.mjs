// Turn an agent function into an rllm agent program in Node, with the
// official `openai` SDK:
//
//   import { run } from "./rllm_program.mjs";
//   run(async (task, client) => {
//     const r = await client.chat.completions.create({ model: "policy", messages: [{ role: "user", content: task.question }] });
//     return r.choices[0].message.content;
//   });
//
// The same file works both ways rllm runs programs (docs/gateway.md): per
// episode (the task on stdin, the session in OPENAI_BASE_URL /
// OPENAI_API_KEY), or served with workflow.args.mode=serve (rllm sets
// RLLM_PROGRAM_MODE=serve): one process for the run, an episode per stdin
// line, each solved concurrently with an OpenAI client of its own for
// that episode's session, answered in any order, aborted (client.signal)
// when rllm cancels it.
//
// solve(task, client, episode) returns the answer (scored by env.name's
// reward function) or {reward: x}; episode.env holds the session's
// variables and episode.signal aborts when rllm cancels the episode (pass
// it on, e.g. to @openai/agents' run(..., {signal})). A thrown error
// fails the episode with its message; served, the process goes on.
import readline from "node:readline";

// The `openai` package is loaded on first use, so a program that talks
// to the Anthropic API (episode.env.ANTHROPIC_BASE_URL) needs only its
// own SDK; client is then null.
let OpenAI;
async function openaiClass() {
  if (OpenAI === undefined) {
    try {
      OpenAI = (await import("openai")).default;
    } catch {
      OpenAI = null;
    }
  }
  return OpenAI;
}

function result(episodeId, out) {
  const line = out !== null && typeof out === "object" && ("reward" in out || "answer" in out)
    ? { ...out } : { answer: typeof out === "string" || typeof out === "number" ? out : JSON.stringify(out ?? "") };
  return JSON.stringify(episodeId === undefined ? line : { episode_id: episodeId, ...line });
}

async function solveOne(solve, task, env, signal) {
  // One client per episode: its session's URL and token, no retries of a
  // call the gateway refused.
  const Client = await openaiClass();
  const client = Client && new Client({ baseURL: env.OPENAI_BASE_URL, apiKey: env.OPENAI_API_KEY, maxRetries: 0 });
  return solve(task, client, { env, signal });
}

async function serve(solve) {
  const running = new Map();
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const write = (s) => process.stdout.write(s + "\n");
  for await (const raw of lines) {
    if (!raw.trim()) continue;
    const msg = JSON.parse(raw);
    const id = msg.episode_id;
    if (msg.cancel) {
      running.get(id)?.abort();
      running.delete(id);
      continue;
    }
    const ctl = new AbortController();
    running.set(id, ctl);
    solveOne(solve, msg.task, msg.env, ctl.signal).then(
      (out) => { if (!ctl.signal.aborted) write(result(id, out)); },
      (err) => {
        if (ctl.signal.aborted) return;
        console.error(err?.stack ?? String(err));
        write(JSON.stringify({ episode_id: id, error: `${err?.name ?? "Error"}: ${err?.message ?? err}` }));
      },
    ).finally(() => running.delete(id));
  }
  // stdin closed: no more episodes; the ones running finish.
}

export async function run(solve) {
  if (process.env.RLLM_PROGRAM_MODE === "serve") return serve(solve);
  let data = "";
  for await (const chunk of process.stdin) data += chunk;
  const out = await solveOne(solve, JSON.parse(data), process.env, new AbortController().signal);
  console.log(result(undefined, out));
}
