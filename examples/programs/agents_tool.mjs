// An agent built with the OpenAI Agents SDK for JavaScript (@openai/agents)
// that has a tool: `calculator` evaluates an arithmetic expression. The
// model may call it (a tool-call turn), read the result and answer (a
// second turn whose prompt extends the first: rllm trains both turns as
// one sequence, the tool result masked out).
//
// Through the helper rllm_program.mjs the same file runs per episode or
// served (workflow.args.mode=serve: one Node process for the run, a
// Runner with an OpenAI client of its own per episode). Train it on the
// built-in arith task (tool calls need a sampler that emits them: a vLLM
// or SGLang server with a tool parser, e.g.
// `vllm serve Qwen/Qwen3-0.6B --enable-auto-tool-choice --tool-call-parser hermes`):
//
//   npm install @openai/agents zod   (in this directory or a parent)
//   rllm train workflow.name=program workflow.args.mode=serve workflow.args.command="node examples/programs/agents_tool.mjs" \
//       rollout.engine=openai rollout.endpoints=[http://127.0.0.1:8000] rollout.model=Qwen/Qwen3-0.6B
import { Agent, OpenAIProvider, Runner, tool, setTracingDisabled } from "@openai/agents";
import { z } from "zod";
import { run } from "./rllm_program.mjs";

setTracingDisabled(true); // no export of traces to OpenAI's platform
// The SDK's default model speaks the Responses API (/v1/responses), which
// the gateway serves; AGENT_API=chat_completions switches it to
// /v1/chat/completions. Both record the same tokens.
const useResponses = process.env.AGENT_API !== "chat_completions";

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

run(async (task, client, { signal }) => {
  // The episode's own client and session.
  const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: client, useResponses }) });
  const result = await runner.run(agent, task.question, { maxTurns: 4, stream, signal });
  if (stream) {
    for await (const _event of result) {
      // drain the events; the final output is ready once they end
    }
    await result.completed;
  }
  return String(result.finalOutput ?? "").trim();
});
