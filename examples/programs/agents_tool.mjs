// An agent built with the OpenAI Agents SDK for JavaScript (@openai/agents)
// that has a tool: `calculator` evaluates an arithmetic expression. The
// model may call it (a tool-call turn), read the result and answer (a
// second turn whose prompt extends the first: rllm trains both turns as
// one sequence, the tool result masked out).
//
// rllm runs it once per episode with the task on stdin and
// OPENAI_BASE_URL / OPENAI_API_KEY pointing at the episode's gateway
// session. Train it on the built-in arith task (tool calls need a sampler
// that emits them: a vLLM or SGLang server with a tool parser, e.g.
// `vllm serve Qwen/Qwen3-0.6B --enable-auto-tool-choice --tool-call-parser hermes`):
//
//   npm install @openai/agents zod   (in this directory or a parent)
//   rllm train workflow.name=program workflow.args.command="node examples/programs/agents_tool.mjs" \
//       rollout.engine=openai rollout.endpoints=[http://127.0.0.1:8000] rollout.model=Qwen/Qwen3-0.6B
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";

setTracingDisabled(true); // no export of traces to OpenAI's platform
// The SDK's default model speaks the Responses API (/v1/responses), which
// the gateway serves; AGENT_API=chat_completions switches it to
// /v1/chat/completions. Both record the same tokens.
if (process.env.AGENT_API === "chat_completions") setOpenAIAPI("chat_completions");
setDefaultOpenAIClient(new OpenAI()); // OPENAI_BASE_URL, OPENAI_API_KEY

const calculator = tool({
  name: "calculator",
  description: "Evaluate an arithmetic expression of integers with + - * / and parentheses.",
  parameters: z.object({ expression: z.string() }),
  execute: async ({ expression }) => {
    if (!/^[0-9+\-*/() ]+$/.test(expression)) return "error: only integers, + - * / and parentheses";
    try {
      return String(Function(`"use strict"; return (${expression});`)());
    } catch (e) {
      return `error: ${e.message}`;
    }
  },
});

async function readStdin() {
  let data = "";
  for await (const chunk of process.stdin) data += chunk;
  return JSON.parse(data);
}

const task = await readStdin();
const agent = new Agent({
  name: "arith",
  instructions: "Answer with the bare integer. Use the calculator when unsure.",
  model: "policy",
  tools: [calculator],
});
// AGENT_STREAM=1 (passed with workflow.args.pass_env=[AGENT_STREAM])
// streams every turn, tool-call fragments included; the gateway records
// the same tokens either way.
const stream = process.env.AGENT_STREAM === "1";
const result = await run(agent, task.question, { maxTurns: 4, stream });
if (stream) {
  for await (const _event of result) {
    // drain the events; the final output is ready once they end
  }
  await result.completed;
}
console.log(JSON.stringify({ answer: String(result.finalOutput ?? "").trim() }));
