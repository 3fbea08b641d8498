// An agent program in JavaScript with the official `openai` npm package,
// through the helper rllm_program.mjs: the same file runs per episode or
// served (workflow.args.mode=serve), with an OpenAI client per episode.
// It streams the reply, as many agents do; the gateway records the same
// tokens either way. Train it on the built-in arith task, served (one
// Node process for the run; about 10 minutes on a 2-core machine):
//
//   npm install openai   (in this directory or a parent: ES modules do not read NODE_PATH)
//   rllm train workflow.name=program workflow.args.mode=serve \
//       workflow.args.command="node examples/programs/openai_agent.mjs" \
//       trainer.total_training_steps=600 trainer.test_freq=100
import { run } from "./rllm_program.mjs";

run(async (task, client, { signal }) => {
  const stream = await client.chat.completions.create(
    { model: "policy", messages: [{ role: "user", content: task.question }], stream: true },
    { signal },
  );
  let answer = "";
  for await (const chunk of stream) answer += chunk.choices[0]?.delta?.content ?? "";
  return answer;
});
