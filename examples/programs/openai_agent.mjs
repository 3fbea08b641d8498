// An agent program in JavaScript with the official `openai` npm package.
//
// rllm runs it once per episode: the task is one JSON object on stdin,
// and OPENAI_BASE_URL / OPENAI_API_KEY point at this episode's session of
// the recording gateway. The last stdout line, {"answer": ...}, is scored
// by env.name's reward function. It streams the reply, as many agents
// do; the gateway records the same tokens either way. Train it on the
// built-in arith task:
//
//   npm install openai   (in this directory or a parent: ES modules do not read NODE_PATH)
//   rllm train workflow.name=program workflow.args.command="node examples/programs/openai_agent.mjs"
import OpenAI from "openai";

async function readStdin() {
  let data = "";
  for await (const chunk of process.stdin) data += chunk;
  return JSON.parse(data);
}

const task = await readStdin();
const client = new OpenAI(); // OPENAI_BASE_URL and OPENAI_API_KEY
const stream = await client.chat.completions.create({
  model: "policy",
  messages: [{ role: "user", content: task.question }],
  stream: true,
});
let answer = "";
for await (const chunk of stream) answer += chunk.choices[0]?.delta?.content ?? "";
console.log(JSON.stringify({ answer }));
