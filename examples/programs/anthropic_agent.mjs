// An agent program with the official Anthropic SDK for JavaScript
// (@anthropic-ai/sdk), calling the gateway's /v1/messages: a tool loop
// with a calculator, each turn streamed (server-sent events).
//
// Through the helper rllm_program.mjs it runs per episode or served
// (workflow.args.mode=serve), with an Anthropic client per episode built
// from the episode's ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY. Train it on the built-in arith task (tool calls need a sampler
// that emits them, e.g. a vLLM server with a tool parser; see
// agents_tool.mjs):
//
//   npm install @anthropic-ai/sdk   (in this directory or a parent)
//   rllm train workflow.name=program workflow.args.mode=serve workflow.args.command="node examples/programs/anthropic_agent.mjs" \
//       rollout.engine=openai rollout.endpoints=[http://127.0.0.1:8000] rollout.model=Qwen/Qwen3-0.6B
import Anthropic from "@anthropic-ai/sdk";
import { run } from "./rllm_program.mjs";

const tools = [{
  name: "calculator",
  description: "Evaluate an arithmetic expression of integers with + - * / and parentheses.",
  input_schema: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
}];

function calculate(expression) {
  if (!/^[0-9+\-*/() ]+$/.test(expression ?? "")) return "error: only integers, + - * / and parentheses";
  try {
    return String(Function(`"use strict"; return (${expression});`)());
  } catch (e) {
    return `error: ${e.message}`;
  }
}

run(async (task, _openai, { env, signal }) => {
  const client = new Anthropic({ baseURL: env.ANTHROPIC_BASE_URL, apiKey: env.ANTHROPIC_API_KEY, maxRetries: 0 });
  const messages = [{ role: "user", content: task.question }];
  let answer = "";
  for (let turn = 0; turn < 4; turn++) {
    const msg = await client.messages.stream({ model: "policy", max_tokens: 256, messages, tools }, { signal }).finalMessage();
    messages.push({ role: "assistant", content: msg.content });
    answer = msg.content.filter((b) => b.type === "text").map((b) => b.text).join("").trim();
    const uses = msg.content.filter((b) => b.type === "tool_use");
    if (msg.stop_reason !== "tool_use" || uses.length === 0) break;
    messages.push({
      role: "user",
      content: uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: calculate(u.input.expression) })),
    });
  }
  return answer;
});
